"""``wbc``: window-based comparison of the target's and the reference's per-token losses (Chen et al.,
"Window-based membership inference attacks against fine-tuned large language models", USENIX Security
2026, https://arxiv.org/abs/2601.02751).

Per text, with per-token losses l_T = -log p_target and l_R = -log p_reference of the same target tokens
(the first ``n = min(len l_T, len l_R)``), and for each window size ``w`` (``min(w, n)`` on a shorter text):
the share of the ``n - w + 1`` sliding windows whose summed reference loss is strictly greater than the
target's (a tie counts as no). The score is the mean of those shares over the window sizes, higher =
member; an empty text scores 0. The rule and the default sizes are the authors' code's:
github.com/Stry233/WBC at commit 8112878, ``attacks/wbc.py`` (``_compute_window_score``, lines 82-107:
windows by a valid convolution, the strict comparison, ``min(w, n)``; ``_process_batch``, lines 109-138:
the mean over sizes) and ``configs/example.yaml`` (lines 21-34: the sizes 2 to 40). The reference is
privauditor's (the un-adapted base by default), whose per-token log-probabilities the split already
stores, so the attack costs no pass of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack
from .reference import ReferenceAttack


def window_vote(target_loss: np.ndarray, reference_loss: np.ndarray, windows: tuple[int, ...]) -> float:
    """The mean over ``windows`` of the share of windows where the reference's summed loss exceeds the
    target's (one text)."""
    n = min(len(target_loss), len(reference_loss))
    if n == 0:
        return 0.0
    t = np.asarray(target_loss[:n], dtype=np.float64)
    r = np.asarray(reference_loss[:n], dtype=np.float64)
    shares = []
    for w in windows:
        ones = np.ones(min(w, n))
        shares.append(float(np.mean(np.convolve(r, ones, "valid") > np.convolve(t, ones, "valid"))))
    return float(np.mean(shares))


@ATTACKS.register("wbc")
@dataclass
class WindowComparisonAttack(Attack):
    """Share of sliding windows where the reference's loss exceeds the target's, averaged over sizes."""

    windows: tuple[int, ...] = (2, 3, 4, 6, 9, 13, 18, 25, 32, 40)  # the authors' configs/example.yaml

    name = "wbc"
    paper = "https://arxiv.org/abs/2601.02751"
    access = "reference"

    def __post_init__(self) -> None:
        if not self.windows or any(not isinstance(w, int) or w < 1 for w in self.windows):
            raise PrivauditorError(f"attack 'wbc': windows must be window sizes >= 1, not {self.windows!r}")
        super().__post_init__()

    views = ReferenceAttack.views  # the target's and the reference's signals, as `reference` reads them

    def score(self, views) -> np.ndarray:
        target, reference = views["signals"].logp, views["reference"].logp
        return np.array(
            [window_vote(-t, -r, self.windows) for t, r in zip(target, reference, strict=True)],
            dtype=np.float64,
        )
