"""``camia``: context-aware membership inference (Chang et al., EMNLP 2025, "Context-Aware Membership
Inference Attacks against Pre-trained Large Language Models", https://arxiv.org/abs/2409.13745), in
its label-free, one-pass variant: each text's log-prob sequence gives shape features, each feature a
p-value against a population of non-members, the p-values combined into one score.

The features are the authors' one-copy features (github.com/changhongyan123/context_aware_mia at commit
3963cb2, ``util_features.py`` ``collect_all_features``, lines 390-451, and ``run_ours_train_lr.py``
``count_above_pre``, lines 296-320), over the sequence x of the text's per-token log-probabilities and
its token ids, each at the authors' cut-offs (x[:-1], x[:200], x[:300]: on texts shorter than 200
tokens the last two agree, as in their code):

- ``loss``: the mean of x; ``ppl``: exp of minus it;
- ``count_above``: the share of x[:200] at or above −1, −2, −3;
- ``lz_complexity``: Lempel-Ziv complexity of x[:200] binned into 3, 4, 5 levels (``lempel_ziv_complexity``:
  x first digitised on 100 edges from min(x) to 0);
- ``token_diversity``: distinct token ids over the count; ``count_mean``: how many values exceed the mean;
- ``calibrated_loss`` and ``calibrated_ppl``: loss and ppl over the token diversity;
- ``count_above_pre``: the share of positions t ≥ 1 where x_t exceeds the mean of x before t (all of x,
  x[:200], x[:300]).

27 values per text in 9 groups. A feature's p-value for a scored text is its percentile rank among the
``population`` part's values (``scipy.stats.percentileofscore``, kind "rank", over 100: the authors'
``compute_p_value`` at lines
374-378), 0 and 1 moved to 1e-10 and 1 − 1e-10 (lines 459-460), and the p-values are combined by Pearson's
method (``scipy.stats.combine_pvalues``, lines 462-463: their code uses Pearson's, its results named "Fisher";
``combine: fisher`` gives the paper's Fisher). The score is the combination's statistic, which orders
texts as minus the combined p-value does without its underflow at the members' end: higher = member.

Deviations from the authors' code, each because it needs labels of the scored texts or a pass this
variant does not make:

1. *Orientation.* A member should sit at a feature's low end; the authors flip a group's sign where its
   mean over the members exceeds its mean over the non-members, using the labels of every text, scored
   ones included (lines 323-328). Here the same comparison uses held-out labelled texts alone: the
   split's ``known_members`` (trained on, never scored) against the ``population``, as ``rmia`` picks
   its ``a``. The scored texts' labels are never read, but labelled members are: the attack's access
   is ``known-members`` (:data:`~privauditor.tasks.attacks._base.ACCESS`), not ``black-box``.
2. *No repetition.* Their data also score each text followed by 5 more copies of itself in one context
   (``run_ours_construct_mia_data.py`` lines 52 and 78-90) for the ``overall_diff_*``, ``slope`` and
   ``approximate_entropy`` features (600-1,000 positions, beyond the tiny bases' positions and a 2-core
   budget); this variant keeps the one-copy features only, so one pass through the target per text.
3. *No classifier.* Their best figures train a logistic regression on labelled features (the "LR" rows);
   the p-value combination is their label-free form, the one kept here.
4. A feature undefined for a text (a one-token text has no x[:-1] mean) contributes p = 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack

#: the authors' cut-offs (end of slice; -1 drops the last token, as their ``get_loss`` does)
ENDS = (-1, 200, 300)
#: count_above's thresholds on log-probabilities, over x[:200]
THRESHOLDS = (-1.0, -2.0, -3.0)
#: lz_complexity's numbers of bins, over x[:200]
BINS = (3, 4, 5)
#: count_above_pre's cut-offs (the first a stand-in for "all of it")
PRE_CUTS = (10**9, 200, 300)
#: p-values are clipped to [P_CLIP, 1 - P_CLIP] before they are combined
P_CLIP = 1e-10
COMBINE = ("pearson", "fisher")


def lz_complexity(x: np.ndarray, bins: int) -> float:
    """Distinct phrases of a left-to-right Lempel-Ziv parse of ``x`` binned to ``bins`` levels, over len(x)."""
    if not len(x):
        return float("nan")
    digits = np.digitize(x, bins=np.linspace(min(x.min(), 0.0), 0.0, 100), right=True)
    levels = np.searchsorted(np.linspace(digits.min(), digits.max(), bins + 1)[1:], digits, side="left")
    seen, start, width = set(), 0, 1
    while start + width <= len(levels):
        phrase = tuple(levels[start : start + width])
        if phrase in seen:
            width += 1
        else:
            seen.add(phrase)
            start, width = start + width, 1
    return len(seen) / len(levels)


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else float("nan")


def features(logp: np.ndarray, token_ids: np.ndarray) -> dict[str, list[float]]:
    """One text's 27 feature values by group, from its log-probabilities and token ids."""
    x = np.asarray(logp, dtype=np.float64)
    ids = np.asarray(token_ids)
    loss = [_mean(x[:end]) for end in ENDS]
    diversity = [len(set(ids[:end].tolist())) / len(ids[:end]) if len(ids[:end]) else np.nan for end in ENDS]
    ppl = [float(np.exp(-v)) for v in loss]
    prefix_means = np.cumsum(x)[:-1] / np.arange(1, len(x)) if len(x) > 1 else np.empty(0)
    return {
        "loss": loss,
        "ppl": ppl,
        "count_above": [_mean((x[:200] >= t).astype(np.float64)) for t in THRESHOLDS],
        "lz_complexity": [lz_complexity(x[:200], b) for b in BINS],
        "token_diversity": diversity,
        "count_mean": [float((x[:end] > x[:end].mean()).sum()) if len(x[:end]) else np.nan for end in ENDS],
        "calibrated_loss": [v / d for v, d in zip(loss, diversity, strict=True)],
        "calibrated_ppl": [v / d for v, d in zip(ppl, diversity, strict=True)],
        "count_above_pre": [
            _mean((x[1:cut] > prefix_means[: cut - 1]).astype(np.float64)) for cut in PRE_CUTS
        ],
    }


def feature_table(signals) -> dict[str, np.ndarray]:
    """Per group, an array (texts × values) of every text of ``signals``."""
    rows = [features(lp, ids) for lp, ids in zip(signals.logp, signals.token_ids, strict=True)]
    if not rows:
        return {}
    return {group: np.array([row[group] for row in rows], dtype=np.float64) for group in rows[0]}


@ATTACKS.register("camia")
@dataclass
class CamiaAttack(Attack):
    """Shape features of the log-prob sequence, p-values against a population, combined."""

    combine: str = "pearson"  # how p-values combine: pearson (the authors' code) or fisher (their paper)

    name = "camia"
    paper = "https://arxiv.org/abs/2409.13745"
    access = "known-members"  # its signs come from the split's known members (deviation 1)

    def __post_init__(self) -> None:
        if self.combine not in COMBINE:
            raise PrivauditorError(f"attack 'camia': combine must be pearson or fisher, not {self.combine!r}")

    def views(self) -> dict:
        from ..views import build_view

        return {
            "signals": build_view("signals"),
            "population": build_view("signals", {"part": "population"}),
            "held_out_members": build_view("signals", {"part": "known_members"}),
        }

    def score(self, views) -> np.ndarray:
        from scipy.stats import combine_pvalues, percentileofscore

        scored, population = feature_table(views["signals"]), feature_table(views["population"])
        known = feature_table(views["held_out_members"])
        pvalues = []
        for group, values in scored.items():
            sign = -1.0 if np.nanmean(known[group]) > np.nanmean(population[group]) else 1.0
            for j in range(values.shape[1]):
                reference = sign * population[group][:, j]
                p = percentileofscore(reference[np.isfinite(reference)], sign * values[:, j]) / 100
                pvalues.append(np.where(np.isfinite(values[:, j]), p, 0.5))
        clipped = np.clip(np.nan_to_num(np.array(pvalues), nan=0.5), P_CLIP, 1 - P_CLIP)
        return np.asarray(combine_pvalues(clipped, method=self.combine, axis=0).statistic, dtype=np.float64)
