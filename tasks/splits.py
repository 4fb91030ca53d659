"""Member / non-member / validation splits, drawn i.i.d. from one pool and fixed by (dataset, seed, sizes).

Members are what an adaptation trains on; non-members are what the attacks must tell them apart from;
the validation set measures the adapted model's utility. All three are disjoint draws from one shuffled
pool, so members and non-members come from the same distribution (an attack can only win by detecting
training, never by a distribution shift). The shuffle depends only on the dataset's content hash and the
seed — not on the adaptation — so every adaptation of a dataset sees the same split.

Example::

    data = load_dataset("finance")
    split = draw_split(data, members=100, nonmembers=100, validation=100, seed=0)
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from .datasets import Example, LoadedDataset
from .datasets._base import content_hash
from .errors import PrivauditorError


@dataclass(frozen=True)
class Split:
    """The three disjoint parts of one (dataset, seed, sizes) draw, with content hashes."""

    dataset: str
    seed: int
    members: tuple[Example, ...]
    nonmembers: tuple[Example, ...]
    validation: tuple[Example, ...]
    dataset_sha256: str

    @property
    def sha256(self) -> str:
        """Identity of the whole split: the three parts' hashes, in order."""
        parts = "".join(content_hash(p) for p in (self.members, self.nonmembers, self.validation))
        return hashlib.sha256(parts.encode()).hexdigest()

    def hashes(self) -> dict[str, str]:
        """Content hash of each part (recorded in every cell's provenance)."""
        return {
            "members": content_hash(self.members),
            "nonmembers": content_hash(self.nonmembers),
            "validation": content_hash(self.validation),
            "split": self.sha256,
        }


def draw_split(data: LoadedDataset, members: int, nonmembers: int, validation: int, seed: int) -> Split:
    """Shuffle the pool with a seed derived from (dataset hash, seed) and cut it into three parts."""
    for name, size in (("members", members), ("nonmembers", nonmembers), ("validation", validation)):
        if not isinstance(size, int) or size < 1:
            raise PrivauditorError(f"split.{name} must be a positive integer, got {size!r}")
    needed = members + nonmembers + validation
    if needed > len(data.examples):
        raise PrivauditorError(
            f"split asks for {needed} records ({members} members + {nonmembers} non-members + "
            f"{validation} validation) but dataset '{data.name}' has {len(data.examples)}"
        )
    # A string seed gives random.Random a stable, platform-independent sha512-based state.
    order = list(range(len(data.examples)))
    random.Random(f"{data.sha256}:{seed}").shuffle(order)
    pick = [data.examples[i] for i in order[:needed]]
    return Split(
        dataset=data.name,
        seed=seed,
        members=tuple(pick[:members]),
        nonmembers=tuple(pick[members : members + nonmembers]),
        validation=tuple(pick[members + nonmembers :]),
        dataset_sha256=data.sha256,
    )
