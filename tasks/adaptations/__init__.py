"""Adaptation techniques (full fine-tuning, LoRA, bottleneck adapters, prompt learning, ...).

One plugin file per technique, registered under its file stem in ``ADAPTATIONS``.
"""

from ..infra.registry import Registry
from ._base import Adaptation

ADAPTATIONS: Registry[type[Adaptation]] = Registry("adaptation", __name__, group="privauditor.adaptations")


def build_adaptation(name: str, params: dict | None = None) -> Adaptation:
    """The technique ``name`` with hyper-parameter overrides; unknown fields are a one-line error."""
    return ADAPTATIONS.build(name, params)


def chosen_rates(name: str) -> dict[str, float]:
    """The learning rates chosen for technique ``name`` on each base by validation NLL
    (``benchmarks/learning_rates.py``): base name -> rate."""
    from ._rates import RATES

    return dict(RATES.get(name, {}))
