"""``neighbourhood``: the neighbourhood attack of Mattern et al. 2023, "Membership Inference Attacks
against Language Models via Neighbourhood Comparison", https://arxiv.org/abs/2305.18462.

Each text gets ``k`` neighbours, near-copies made by a masked LM's substitutions (the offline tiny masked
LM, generated once per dataset split and shared by every cell; see ``privauditor.tasks.neighbours``).
score = mean NLL of the neighbours − NLL of the text, both under the adapted model: a member's loss is
lower than its neighbours', a non-member's is not. The paper uses k 25 (the default); a sweep may set a
smaller k where time is short.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("neighbourhood")
@dataclass
class NeighbourhoodAttack(Attack):
    """Mean neighbour NLL minus the text's NLL."""

    k: int = 25  # neighbours per text (Mattern et al.)
    mask_fraction: float = 0.1  # share of a text's tokens substituted in each neighbour

    name = "neighbourhood"
    paper = "https://arxiv.org/abs/2305.18462"
    needs = ("neighbours",)

    def __post_init__(self) -> None:
        if type(self.k) is not int or self.k < 1:
            raise PrivauditorError(f"attack 'neighbourhood': k must be a positive int, not {self.k!r}")
        if not isinstance(self.mask_fraction, int | float) or not 0 < self.mask_fraction < 1:
            raise PrivauditorError(
                f"attack 'neighbourhood': mask_fraction must be in (0, 1), not {self.mask_fraction!r}"
            )

    def score(self, signals, reference=None) -> np.ndarray:
        if signals.neighbour_nll is None:
            raise ValueError("the neighbourhood attack needs the neighbours' NLL (signals.neighbour_nll)")
        neighbours = np.array([np.mean(n[: self.k]) for n in signals.neighbour_nll], dtype=np.float64)
        return neighbours - signals.nll
