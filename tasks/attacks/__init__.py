"""Membership-inference attacks, one plugin file each, registered under the file stem in ``ATTACKS``.

An attack declares the views it reads (``views()``: role → view, by default the target's signals) and is
a pure function from those views to one score per scored sample, higher = more likely a member.
Hyper-parameters are dataclass fields.
"""

from ..infra.registry import Registry
from ._base import Attack

ATTACKS: Registry[type[Attack]] = Registry("attack", __name__, group="privauditor.attacks")


def build_attack(name: str, params: dict | None = None) -> Attack:
    """The attack ``name`` with hyper-parameter overrides; unknown fields are a one-line error."""
    return ATTACKS.build(name, params)
