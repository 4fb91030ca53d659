"""``gap_k``: Gap-K% (2026, https://arxiv.org/abs/2601.19936).

Per token the gap between the actual token's log-probability and the most likely token's, standardised
by the spread of log p over the vocabulary at that position (Min-K%++'s sigma):
g_t = (log p(x_t) − max_v log p(v)) / sigma_t ≤ 0. The gaps are smoothed by a moving average over
``window`` tokens (none on a text shorter than the window), and the score is the mean of the lowest
``k`` fraction of the smoothed gaps, ``max(1, int(k·n))`` of them: a member has no position where the
model preferred another token by far. Higher = member. The rule and defaults are the authors' code's:
github.com/meaoww/gap-k at commit 28d8b93, ``wikimia.py`` (``window_lowmean``, lines 75-87: a "valid"
convolution with equal weights, the lowest ``int(len·ratio)`` but at least one; lines 115-139: sigma from
the variance of log p clamped at 1e-8, the gap as the true token's minus the top-1's log p, divided by
sigma; ``RATIO = 0.2`` at line 42, ``--window_size`` 3 at line 39). Reads the signal store's ``top1_logp``,
``sigma``: one pass, shared with the other logit attacks. Deviation: the clamp applies to the stored
sigma, as 1e-4 = sqrt(1e-8); the authors' ``mimir.py`` (lines 131-138) computes the same sigma without a
clamp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack, check_fraction

SIGMA_FLOOR = 1e-4  # the authors clamp the variance at 1e-8


def smoothed_lowest_mean(values: np.ndarray, window: int, k: float) -> float:
    """The mean of the lowest ``max(1, int(k·m))`` of the ``m`` moving averages of ``window`` values (the
    values themselves when there are fewer than ``window``)."""
    values = np.asarray(values, dtype=np.float64)
    if not len(values):
        return float("nan")
    if len(values) >= window:
        values = np.convolve(values, np.ones(window) / window, mode="valid")
    count = max(1, int(len(values) * k))
    return float(np.sort(values)[:count].mean())


@ATTACKS.register("gap_k")
@dataclass
class GapKAttack(Attack):
    """Mean of the lowest ``k`` fraction of smoothed, standardised top-1 gaps."""

    k: float = 0.2
    window: int = 3

    name = "gap_k"
    paper = "https://arxiv.org/abs/2601.19936"

    def __post_init__(self) -> None:
        check_fraction(self.name, "k", self.k)
        if not isinstance(self.window, int) or self.window < 1:
            raise PrivauditorError(f"attack 'gap_k': window must be an integer >= 1, not {self.window!r}")

    def score(self, views) -> np.ndarray:
        signals = views["signals"]
        signals.needs(self.name, "top1_logp")
        return np.array(
            [
                smoothed_lowest_mean(
                    (lp.astype(np.float64) - top.astype(np.float64))
                    / np.maximum(sd.astype(np.float64), SIGMA_FLOOR),
                    self.window,
                    self.k,
                )
                for lp, top, sd in zip(signals.logp, signals.top1_logp, signals.sigma, strict=True)
            ],
            dtype=np.float64,
        )
