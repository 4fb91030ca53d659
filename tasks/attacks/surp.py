"""``surp``: surprising tokens (Zhang & Wu 2024, "Adaptive Pre-training Data Detection for Large Language
Models via Surprising Tokens", https://arxiv.org/abs/2407.21248).

A token is surprising when the model was confident at its position (entropy below ``max_entropy`` nats)
and still gave the actual token a low probability (among the text's lowest ``k`` fraction of log p,
counted as ``max(1, int(k·n))`` like Min-K%). score = mean log p over the surprising tokens: training
makes a member's surprising tokens less surprising. The entropy is −``mu`` of the stored signals.
Defaults k = 20 %, max_entropy = 2.0 nats, as in the paper's code; a text with no surprising token
scores −100, the code's value for it, below any real mean log-probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PrivauditorError
from . import ATTACKS
from ._base import Attack, check_fraction

NONE_SURPRISING = -100.0


@ATTACKS.register("surp")
@dataclass
class SurpAttack(Attack):
    """Mean log-probability of the confidently mispredicted tokens."""

    k: float = 0.2  # fraction of the text's tokens with the lowest log p
    max_entropy: float = 2.0  # nats; positions where the model was at least this sure

    name = "surp"
    paper = "https://arxiv.org/abs/2407.21248"

    def __post_init__(self) -> None:
        check_fraction(self.name, "k", self.k)
        if not self.max_entropy > 0:
            raise PrivauditorError(f"attack 'surp': max_entropy must be positive, not {self.max_entropy!r}")

    def score(self, views) -> np.ndarray:
        signals = views["signals"]
        out = np.full(len(signals), NONE_SURPRISING, dtype=np.float64)
        for i, (logp, mu) in enumerate(zip(signals.logp, signals.mu, strict=True)):
            logp = np.asarray(logp, dtype=np.float64)
            if not len(logp):
                continue
            count = max(1, int(self.k * len(logp)))
            lowest = np.zeros(len(logp), dtype=bool)
            lowest[np.argsort(logp, kind="stable")[:count]] = True
            surprising = lowest & (-np.asarray(mu, dtype=np.float64) < self.max_entropy)
            if surprising.any():
                out[i] = logp[surprising].mean()
        return out
