"""``neighbourhood``: the neighbourhood attack of Mattern et al. 2023, "Membership Inference Attacks
against Language Models via Neighbourhood Comparison", https://arxiv.org/abs/2305.18462.

Each text gets ``k`` neighbours, near-copies made by a masked LM's substitutions (the ``neighbours``
view: the offline tiny masked LM's, generated once per dataset split and shared by every cell).
score = mean NLL of the neighbours − NLL of the text, both under the adapted model: a member's loss is
lower than its neighbours', a non-member's is not. The paper uses k 25 (the default); a sweep may set a
smaller k where time is short. Two neighbourhood attacks with other ``k`` or ``mask_fraction`` read
views of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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

    def views(self) -> dict:
        from ..views import build_view

        neighbours = build_view("neighbours", {"k": self.k, "mask_fraction": self.mask_fraction})
        return {"signals": build_view("signals"), "neighbours": neighbours}

    def score(self, views) -> np.ndarray:
        neighbours = np.array([np.mean(n) for n in views["neighbours"]], dtype=np.float64)
        return neighbours - views["signals"].nll
