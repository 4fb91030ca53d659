"""``informia``: InfoRMIA at the token level (Tao & Shokri, ICLR 2026, https://arxiv.org/abs/2510.05582).

RMIA compares a text's likelihood ratio Pr(x | θ) / Pr(x | reference) with population samples' through an
indicator (``rmia``: the share of population texts it beats). InfoRMIA replaces the indicator by a
continuous, information-theoretic score, per token: the log-ratio of the actual token, less its expectation
over the reference's own next-token distribution, which plays the population,

    s_t = [log p_T(x_t) − log p_R(x_t)] − Σ_v p_R(v) [log p_T(v) − log p_R(v)]
        = log p_T(x_t) − log p_R(x_t) + KL(p_R ‖ p_T)_t,

the KL divergence per token being the ``reference_kl`` view (exactly 0 where the target is the reference,
as for ``none``). The text's score
is the mean of s_t over its target tokens (``aggregate: mean``), or the mean of its lowest ``k`` fraction
(``mink``), or their sum. Higher = member. The formula and defaults are the first author's code's:
github.com/taojiashu/mimir (a fork of MIMIR) at commit bc87d69, ``mimir/attacks/info_rmia.py`` lines
162-196 (the reference's mean log-probabilities, the expectation term at 183, the per-token score at
192, the sign at 196) and ``mimir/config.py`` lines 71-77 (``aggregate="mean"``, ``k=0.2``); nothing
in its README ties it to the paper, and no other code of the authors was found. Deviations: one
reference (the un-adapted base by default; the code averages several references' log-probabilities);
``mink`` counts ``max(1, int(k·n))`` tokens where the code takes ``int(k·n)``; the code drops logits
past the tokenizer's vocabulary, privauditor's models have none. Cost: the target's signals, the
reference's (shared per split) and two passes of the ``reference_kl`` view.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack, check_fraction, lowest_k_mean

AGGREGATES = ("mean", "mink", "sum")


@ATTACKS.register("informia")
@dataclass
class InfoRmiaAttack(Attack):
    """Mean per-token log-ratio less its expectation under the reference's next-token distribution."""

    aggregate: str = "mean"
    k: float = 0.2  # for aggregate mink

    name = "informia"
    paper = "https://arxiv.org/abs/2510.05582"
    access = "reference"

    def __post_init__(self) -> None:
        if self.aggregate not in AGGREGATES:
            raise PrivauditorError(
                f"attack 'informia': aggregate must be one of {', '.join(AGGREGATES)}, not {self.aggregate!r}"
            )
        check_fraction(self.name, "k", self.k)
        super().__post_init__()

    def views(self) -> dict:
        from ..views import build_view

        return {
            "signals": build_view("signals"),
            "reference": build_view("signals", {"model": "reference"}),
            "reference_kl": build_view("reference_kl"),
        }

    def score(self, views) -> np.ndarray:
        target, reference = views["signals"], views["reference"]
        per_token = [
            lp_t.astype(np.float64) - lp_r + kl
            for lp_t, lp_r, kl in zip(target.logp, reference.logp, views["reference_kl"], strict=True)
        ]
        if self.aggregate == "mink":
            return lowest_k_mean(per_token, self.k)
        if self.aggregate == "sum":
            return np.array([s.sum() for s in per_token], dtype=np.float64)
        return np.array([s.mean() if len(s) else np.nan for s in per_token], dtype=np.float64)
