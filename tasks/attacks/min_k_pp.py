"""``min_k_pp``: Min-K%++ (Zhang et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training
Data from Large Language Models", https://arxiv.org/abs/2404.02936).

Each token's log p is standardised by the model's own distribution at that position,
(log p(x_t) − mu_t) / sigma_t, with mu_t and sigma_t the mean and standard deviation of log p over the
vocabulary under p (stored per token by the signal store); score = mean of the lowest K % (20 %), counted
as ``max(1, int(K * n))`` tokens like Min-K% (MIMIR: ``int(K * n)``, none for a short text).
Members sit at local maxima of the likelihood, so their tokens stand out against the distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack, check_fraction, lowest_k_mean


@ATTACKS.register("min_k_pp")
@dataclass
class MinKPlusPlusAttack(Attack):
    """Mean of the lowest ``k`` fraction of standardised per-token log-probabilities."""

    k: float = 0.2

    name = "min_k_pp"
    paper = "https://arxiv.org/abs/2404.02936"

    def __post_init__(self) -> None:
        check_fraction(self.name, "k", self.k)

    def score(self, views) -> np.ndarray:
        signals = views["signals"]
        tiny = np.float32(1e-12)  # a one-hot distribution has sigma 0
        z = [
            (lp - mu) / np.maximum(sd, tiny)
            for lp, mu, sd in zip(signals.logp, signals.mu, signals.sigma, strict=True)
        ]
        return lowest_k_mean(z, self.k)
