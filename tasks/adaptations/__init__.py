"""Adaptation techniques (full fine-tuning, LoRA, bottleneck adapters, prompt learning, ...).

One plugin file per technique, registered under its file stem in ``ADAPTATIONS``.
"""

import dataclasses

from ..errors import PrivauditorError
from ..registry import Registry, unknown_name_message
from ._base import Adaptation

ADAPTATIONS: Registry[type[Adaptation]] = Registry("adaptation", __name__)


def build_adaptation(name: str, params: dict | None = None) -> Adaptation:
    """The technique ``name`` with hyper-parameter overrides; unknown fields are a one-line error."""
    cls = ADAPTATIONS.get(name)
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for key in params or {}:
        if key not in fields:
            raise PrivauditorError(unknown_name_message(f"{name} hyper-parameter", key, sorted(fields)))
    return cls(**(params or {}))
