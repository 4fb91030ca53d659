"""Membership-inference attacks, one plugin file each, registered under the file stem in ``ATTACKS``.

An attack is a pure function from stored signals (plus the extra views it declares in ``needs``) to one
score per sample, higher = more likely a member. Hyper-parameters are dataclass fields.
"""

from ..registry import Registry
from ._base import Attack

ATTACKS: Registry[type[Attack]] = Registry("attack", __name__)


def build_attack(name: str, params: dict | None = None) -> Attack:
    """The attack ``name`` with hyper-parameter overrides; unknown fields are a one-line error."""
    return ATTACKS.build(name, params)
