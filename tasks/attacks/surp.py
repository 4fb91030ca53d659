"""``surp``: surprising tokens (Zhang & Wu 2024, "Adaptive Pre-training Data Detection for Large Language
Models via Surprising Tokens", https://arxiv.org/abs/2407.21248).

A token is surprising when the model was confident at its position (entropy below ``max_entropy`` nats)
and still gave the actual token a low probability (among the text's lowest ``k`` fraction of log p,
counted as ``max(1, int(k·n))`` like Min-K%). score = mean log p over the surprising tokens: training
makes a member's surprising tokens less surprising. The entropy is −``mu`` of the stored signals.
No code from the paper's authors was found; the formula is that of the re-implementation in the SoK
benchmark (Meeus et al. 2024, github.com/computationalprivacy/mia_llms_benchmark at commit 0673743,
``attacks/surp.py`` lines 26-46: natural-log entropy, a strict ``<``), and the defaults are the ones
its configs run and its README (line 82) takes from the paper's best setup (its Section 5.3): k = 40 %,
max_entropy = 2.0 nats (``config_template_mimir.yaml`` lines 71-75; the code's own default k of 20 %,
privauditor's before version 2, is not what it runs). Deviations: the count of lowest tokens is
``max(1, int(k·n))`` where the SoK's is ``int(k·n)`` (none on a text of fewer than 1/k tokens); the
SoK counts one padding position per padded text (its mask is the input's, shifted), privauditor none.
A text with no surprising token has nothing to say: the SoK scores it −100, so that where no text has
one (common on small bases: at k 20 % and 2 nats every text of 85 of the default's 192 checkpoints) the
attack scored a constant and reported chance as a measurement. Here it abstains on such a text (NaN): the text ranks
below every text it scores, the metrics count them (``abstained``), and where it abstains on every text
it reports no AUC at all (``skipped``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack, check_fraction


@ATTACKS.register("surp")
@dataclass
class SurpAttack(Attack):
    """Mean log-probability of the confidently mispredicted tokens."""

    k: float = 0.4  # fraction of the text's tokens with the lowest log p (the SoK's configs)
    max_entropy: float = 2.0  # nats; positions where the model was at least this sure

    name = "surp"
    paper = "https://arxiv.org/abs/2407.21248"
    version = 2  # 2: abstains on a text with no surprising token (was -100); k 0.4 (was 0.2)
    abstains = "no surprising token"

    def __post_init__(self) -> None:
        check_fraction(self.name, "k", self.k)
        if not self.max_entropy > 0:
            raise PrivauditorError(f"attack 'surp': max_entropy must be positive, not {self.max_entropy!r}")

    def score(self, views) -> np.ndarray:
        signals = views["signals"]
        out = np.full(len(signals), np.nan, dtype=np.float64)
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
