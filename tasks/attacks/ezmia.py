"""``ezmia``: the error-zone attack, EZ-MIA (Ilić et al. 2026, https://arxiv.org/abs/2601.12104).

Per text, over the positions where the target's most likely token is not the actual one (the "error
zone": the stored ``rank`` > 1), the differences d_t = log p_target(x_t) − log p_reference(x_t); the
score is the sum of the positive d_t over the sum of the magnitudes of the negative ones: a member's
errors are still pulled towards its tokens. Higher = member. The rule is the authors' code's:
github.com/JetBrains-Research/ez-mia at commit aa0b6b7, ``mia/ez_score.py``
(``error_zone_pos_neg_sum_ratio``, lines 23-53: the error zone from the target's top-1 at line 42, the
differences of natural log-probabilities at 45, the ratio with 1e-12 added to the denominator at 50) and
``mia/models.py`` (``compute_ez_scores``, lines 332-361: the target's top-1 alone, ``min_tokens=2`` at
358). The reference is privauditor's (the un-adapted base by default, as the authors' "base" variant),
whose signals the split already stores, so the attack costs no pass of its own.

The score is reported as r / (1 + r) of the authors' ratio r, in [0, 1): the same order, so the same AUC
and TPRs, with room at 1 for r = ∞. Degenerate texts: the authors' code scores 0 (lines 43-44 and 48-52)
a text with fewer than ``min_tokens`` error-zone tokens, no negative difference, or a ratio that is
NaN, and so does ``ezmia``. Such texts are the best memorised members: the target predicts all but at
most one of their tokens, or beats the reference everywhere it errs (r = ∞). Scoring them 0 ranks them
with the least likely members, so that on a model that memorised its members the attack finds none of
them (on the full fine-tuning canary of the tests, AUC 0.50 where every other attack is far above it).
:mod:`.ezmia_degenerate_one` is the same attack with degenerate texts scored 1, above every other
text: a variant of privauditor's, not the authors', registered under its own name so that no table
shows its numbers as EZ-MIA's. ``metrics.json`` counts degenerate texts (``degenerate``,
``degenerate_members``) for both. Deviations from the authors' code: (1) the authors drop
the first scored position of every text (``ignore_bos``, lines 18-19: with GPT-2 and right padding,
the prediction of the text's second token); here the scored positions are the target's tokens after
the prompt, each with a context, and all of them count; (2) the error zone is "rank > 1" (a token tied
with the best counts as predicted), where ``argmax`` picks the first of tied tokens; (3) their
evaluation interpolates TPR on the ROC curve (``mia/metrics.py`` lines 7-12, ``np.interp``);
privauditor's metrics do not (LiRA's rule, :mod:`privauditor.tasks.stats.metrics`), so compare with their
paper's TPRs knowing that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack
from .reference import ReferenceAttack


def error_zone_score(target_logp, reference_logp, rank, min_tokens: int) -> float | None:
    """One text's r / (1 + r), r the sum of positive over the sum of negative target-minus-reference
    log-prob differences on the positions the target mispredicts; None where the authors' code gives 0
    (a degenerate text)."""
    n = min(len(target_logp), len(reference_logp))
    zone = np.asarray(rank[:n]) > 1
    if zone.sum() < min_tokens:
        return None
    deltas = np.asarray(target_logp[:n], np.float64)[zone] - np.asarray(reference_logp[:n], np.float64)[zone]
    negative = -deltas[deltas < 0].sum()
    if negative == 0:
        return None
    ratio = deltas[deltas > 0].sum() / (negative + 1e-12)
    return float(ratio / (1 + ratio))


@ATTACKS.register("ezmia")
@dataclass
class ErrorZoneAttack(Attack):
    """Positive over negative target-minus-reference log-prob differences on mispredicted tokens."""

    min_tokens: int = 2  # fewest error-zone tokens a text needs (the authors' min_tokens)

    name = "ezmia"
    paper = "https://arxiv.org/abs/2601.12104"
    access = "reference"
    version = 2  # 2: degenerate texts score the authors' 0 (version 1 scored them 1: ezmia_degenerate_one)
    #: the score of a degenerate text (see the module doc): the authors' 0
    degenerate_score: ClassVar[float] = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.min_tokens, int) or self.min_tokens < 1:
            raise PrivauditorError(
                f"attack '{self.name}': min_tokens must be an integer >= 1, not {self.min_tokens!r}"
            )
        super().__post_init__()

    views = ReferenceAttack.views  # the target's and the reference's signals, as `reference` reads them

    def score(self, views) -> np.ndarray:
        target, reference = views["signals"], views["reference"]
        target.needs(self.name, "rank")
        found = [
            error_zone_score(t, r, rank, self.min_tokens)
            for t, r, rank in zip(target.logp, reference.logp, target.rank, strict=True)
        ]
        degenerate = np.array([s is None for s in found], dtype=bool)
        self._found = {
            "degenerate": int(degenerate.sum()),
            "degenerate_members": int((degenerate & target.member).sum()),
        }
        return np.array([self.degenerate_score if s is None else s for s in found], dtype=np.float64)

    def fitted(self) -> dict:
        return dict(getattr(self, "_found", {}))
