"""``dc_pdd``: DC-PDD (Zhang et al. 2024, "Pretraining Data Detection for Large Language Models: A
Divergence-based Calibration Method", https://aclanthology.org/2024.emnlp-main.300/).

Per target token t with probability p_t under the adapted model and smoothed frequency f_t in a reference
corpus (the ``token_frequency`` view), α_t = p_t · log(1 / f_t), the token's cross-entropy-like
divergence term; only each distinct token's first occurrence counts, α is capped at ``a`` (0.01, the
paper's and its code's), and score = mean α. A member's tokens are more probable than their corpus
frequency explains. The paper's code scores a text from its first token; here, as every attack here, the
target tokens given the prompt are scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("dc_pdd")
@dataclass
class DcPddAttack(Attack):
    """Mean capped probability-times-rarity over each token's first occurrence."""

    a: float = 0.01  # cap on each token's term
    corpus: str | None = None  # reference corpus (see the token_frequency view); None: the offline one

    name = "dc_pdd"
    paper = "https://aclanthology.org/2024.emnlp-main.300/"

    def __post_init__(self) -> None:
        if not self.a > 0:
            raise PrivauditorError(f"attack 'dc_pdd': a must be positive, not {self.a!r}")
        super().__post_init__()

    def views(self) -> dict:
        from ..views import build_view

        return {
            "signals": build_view("signals"),
            "frequency": build_view("token_frequency", {"corpus": self.corpus}),
        }

    def score(self, views) -> np.ndarray:
        signals, frequency = views["signals"], views["frequency"]
        out = np.empty(len(signals), dtype=np.float64)
        for i, (ids, logp, f) in enumerate(zip(signals.token_ids, signals.logp, frequency, strict=True)):
            _, first = np.unique(np.asarray(ids), return_index=True)
            alpha = np.exp(np.asarray(logp, dtype=np.float64)[first]) * -np.log(np.asarray(f)[first])
            out[i] = np.minimum(alpha, self.a).mean() if len(first) else np.nan
        return out
