"""``min_k``: Min-K% Prob (Shi et al. 2024, "Detecting Pretraining Data from Large Language Models",
https://arxiv.org/abs/2310.16789).

score = mean log p of the K % least likely target tokens (K 20 % by default): non-members have some
very unlikely tokens, members fewer. K % of n tokens is ``max(1, int(K * n))`` tokens: rounded down as
MIMIR rounds, but at least one, where MIMIR keeps none (a text under 1 / K tokens scores NaN there and
leaves its ROC; here every text is scored).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack, check_fraction, lowest_k_mean


@ATTACKS.register("min_k")
@dataclass
class MinKAttack(Attack):
    """Mean of the lowest ``k`` fraction of per-token log-probabilities."""

    k: float = 0.2

    name = "min_k"
    paper = "https://arxiv.org/abs/2310.16789"

    def __post_init__(self) -> None:
        check_fraction(self.name, "k", self.k)

    def score(self, views) -> np.ndarray:
        return lowest_k_mean(views["signals"].logp, self.k)
