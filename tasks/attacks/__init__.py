"""Membership-inference attacks, one plugin file each, registered under the file stem in ``ATTACKS``.

An attack is a pure function from stored per-token signals to one score per sample (higher = member).
"""

from ..registry import Registry

ATTACKS: Registry = Registry("attack", __name__)
