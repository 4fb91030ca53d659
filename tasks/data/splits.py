"""Splits: disjoint parts drawn i.i.d. from one shuffled pool, fixed by (dataset, seed, sizes).

The parts, defined here once:

- ``members``: trained on and scored; what an attack must recognise;
- ``nonmembers``: scored, never trained on; what members are told apart from;
- ``validation``: the adapted model's utility (held-out loss), never trained on nor scored;
- ``population``: never trained on nor scored: reference samples for attacks that compare a text with a
  population, and prefixes of known non-members;
- ``known_members``: trained on, never scored: prefixes of known members for attacks that use them;
- ``canaries`` (``split.canaries``): records of a fixed format with a random secret, trained on (each
  ``repeats`` times, if included), never scored by an attack: their exposure is measured instead
  (:mod:`privauditor.tasks.leakage.canaries`); or the one-run DP audit's canaries
  (:mod:`privauditor.tasks.leakage.audit_canaries`). Drawn from the seed, or (``record`` canaries) from the
  pool past every other part, so the other parts stay as they are.

Duplication (``repeated``, ``repeats``): the first ``round(repeated · members)`` members (a random subset,
the pool being shuffled) are cut into equal groups, one per entry of ``repeats``, and each group's members
are trained that many times in the one run, the other members once; so repeated members are compared
with singletons of the same run (no confound with the number of steps), and every member is still scored
once.

All come from one pool shuffled by (dataset content hash, seed), cut in that order, so members and
non-members share one distribution (an attack can only win by detecting training, never by a
distribution shift), every adaptation of a dataset sees the same split, and adding a population or
known members leaves the other parts as they were. Bump :data:`SPLIT_VERSION` when the drawing changes.

An offline dataset's ``reserved`` pool (records generated after its pool) is outside every split: no
cell trains on it or scores it. :func:`draw_reserved` cuts the same parts from it, for choosing settings
(learning rates, ``benchmarks/learning_rates.py``) on records that are never audited.

Example::

    split = draw_split(load_dataset("finance"), SplitConfig(members=100, population=50), seed=0)
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from ..datasets import Example, LoadedDataset
from ..datasets._base import content_hash
from ..infra.errors import PrivauditorError
from ..leakage.canaries import Canary, make_canaries

SPLIT_VERSION = 1
#: every part, in the order the pool is cut
PARTS = ("members", "nonmembers", "validation", "population", "known_members")
#: parts that must not be empty
REQUIRED = ("members", "nonmembers", "validation")
LABELS = {"nonmembers": "non-members", "known_members": "known members"}


@dataclass(frozen=True)
class Split:
    """The disjoint parts of one (dataset, seed, sizes) draw, with content hashes."""

    dataset: str
    seed: int
    members: tuple[Example, ...]
    nonmembers: tuple[Example, ...]
    validation: tuple[Example, ...]
    dataset_sha256: str
    population: tuple[Example, ...] = ()
    known_members: tuple[Example, ...] = ()
    repeated: tuple[tuple[Example, int], ...] = ()  # (member, how many times it is trained), each > 1
    canaries: tuple[Canary, ...] = ()

    @property
    def trained(self) -> tuple[Example, ...]:
        """What an adaptation trains on: the members, their extra copies, the known members, then each
        included canary as many times as it repeats."""
        extra = tuple(e for e, times in self.repeated for _ in range(times - 1))
        canaries = tuple(c.example for c in self.canaries if c.included for _ in range(c.repeats))
        return self.members + extra + self.known_members + canaries

    def repeats(self) -> dict[str, int]:
        """Sample id → times trained, for the repeated members."""
        return {e.sample_id: times for e, times in self.repeated}

    @property
    def scored(self) -> tuple[Example, ...]:
        """What the attacks score: the members, then the non-members."""
        return self.members + self.nonmembers

    @property
    def sha256(self) -> str:
        """Identity of the whole split: every part's hash, in order."""
        return hashlib.sha256("".join(content_hash(getattr(self, p)) for p in PARTS).encode()).hexdigest()

    def hashes(self) -> dict[str, str]:
        """Content hash of each part and of the whole (recorded in every cell's provenance)."""
        return {part: content_hash(getattr(self, part)) for part in PARTS} | {"split": self.sha256}

    def ids(self) -> dict[str, list[str]]:
        """The sample ids of each part."""
        return {part: [e.sample_id for e in getattr(self, part)] for part in PARTS}


def draw_split(data: LoadedDataset, sizes: Any, seed: int) -> Split:
    """Shuffle the pool with a seed derived from (dataset hash, seed) and cut it into the parts, sized by
    ``sizes`` (anything with the part names as attributes, e.g. a ``SplitConfig``)."""
    return _draw(data, data.examples, data.sha256, sizes, seed, f"dataset '{data.name}'")


def draw_reserved(data: LoadedDataset, sizes: Any, seed: int) -> Split:
    """The parts cut from ``data``'s reserved pool instead of its examples (the same drawing rule)."""
    if not data.reserved:
        raise PrivauditorError(f"dataset '{data.name}' has no reserved pool (offline datasets have one)")
    reserved_hash = content_hash(data.reserved)
    return _draw(data, data.reserved, reserved_hash, sizes, seed, f"the reserved pool of '{data.name}'")


def _draw(data: LoadedDataset, pool: tuple[Example, ...], pool_hash: str, sizes: Any, seed: int,
          where: str) -> Split:  # fmt: skip
    counts = {part: getattr(sizes, part, 0) for part in PARTS}
    for part, size in counts.items():
        low = 1 if part in REQUIRED else 0
        if not isinstance(size, int) or isinstance(size, bool) or size < low:
            raise PrivauditorError(f"split.{part} must be an integer of at least {low}, got {size!r}")
    needed = sum(counts.values())
    if needed > len(pool):
        asked = " + ".join(f"{n} {LABELS.get(part, part)}" for part, n in counts.items() if n)
        raise PrivauditorError(f"split asks for {needed} records ({asked}) but {where} has {len(pool)}")
    # A string seed gives random.Random a stable, platform-independent sha512-based state.
    order = list(range(len(pool)))
    random.Random(f"{pool_hash}:{seed}").shuffle(order)
    parts, start = {}, 0
    for part, size in counts.items():
        parts[part] = tuple(pool[i] for i in order[start : start + size])
        start += size
    chosen = parts["members"][: round(getattr(sizes, "repeated", 0.0) * counts["members"])]
    groups = tuple(getattr(sizes, "repeats", (1,)))
    repeated = tuple((e, groups[i * len(groups) // len(chosen)]) for i, e in enumerate(chosen))
    settings = getattr(sizes, "canaries", None)
    rest = tuple(pool[i] for i in order[start:])  # record canaries come from here
    canaries = make_canaries(settings, seed, rest) if settings is not None else ()
    return Split(dataset=data.name, seed=seed, dataset_sha256=pool_hash, repeated=repeated, canaries=canaries,
                 **parts)  # fmt: skip
