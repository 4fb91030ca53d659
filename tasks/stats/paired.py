"""Paired resampling of two score sets on the same records: how a change of the model (a shipped form of
the trained one: tasks/shipping) changes an attack's AUC and TPR at a low FPR.

:func:`paired_differences` draws stratified bootstrap resamples (members and non-members each with
replacement, as :func:`~privauditor.tasks.stats.metrics.bootstrap_auc_ci` does) and scores *both* models
on each resample, so the difference's spread holds the records' sampling and not the models' shared part
(Efron & Tibshirani 1993, "An Introduction to the Bootstrap", Ch. 13, for paired data). A mean of
differences over independent cells resamples each cell on its own, and averages the draws index by index
(:func:`mean_interval`); the percentile interval then covers the mean difference over the records'
population of those cells, for those trained models: not over training seeds or other bases.
``tests/test_paired.py`` checks the interval's coverage by simulation and its agreement with DeLong's
textbook interval of one AUC difference (:func:`~privauditor.tasks.stats.significance.delong`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .metrics import _exact, operating_point, resampled_aucs, roc_counts


def paired_differences(
    member: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    resamples: int,
    seed: int,
    target: float | None = 0.01,
) -> dict[str, np.ndarray]:
    """Per resample, ``after``'s AUC less ``before``'s (``auc``) and their TPRs at FPR below ``target``
    (``tpr``; absent without a target, or where the non-members are fewer than 1 / target), on the same
    resampled records."""
    member = np.asarray(member, bool)
    rng = np.random.default_rng(seed)
    m, n = int(member.sum()), int((~member).sum())
    pick_pos = rng.integers(0, m, size=(resamples, m))
    pick_neg = rng.integers(0, n, size=(resamples, n))
    found = {}
    aucs = [resampled_aucs(s[member], s[~member], pick_pos, pick_neg) for s in (before, after)]
    found["auc"] = aucs[1] - aucs[0]
    if target is not None and n * _exact(target)[0] >= _exact(target)[1]:  # enough non-members for the rate
        found["tpr"] = _tpr(member, (before, after), pick_pos, pick_neg, target)
    return found


def _tpr(
    member: np.ndarray, pair: tuple, pick_pos: np.ndarray, pick_neg: np.ndarray, target: float
) -> np.ndarray:
    """Per resample, the second score set's TPR at FPR below ``target`` less the first's (enough
    non-members to read the rate)."""
    m, n = pick_pos.shape[1], pick_neg.shape[1]
    labels = np.r_[np.ones(m, bool), np.zeros(n, bool)]
    tprs = np.empty((2, len(pick_pos)))
    for k, s in enumerate(pair):
        pos, neg = s[member], s[~member]
        for r in range(len(pick_pos)):
            _, tp, fp = roc_counts(labels, np.r_[pos[pick_pos[r]], neg[pick_neg[r]]])
            tprs[k, r] = tp[operating_point(tp, fp, n, target) or 0] / m  # an index: n is enough
    return tprs[1] - tprs[0]


def mean_interval(draws: Sequence[np.ndarray], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of the mean over cells of their paired differences (each cell's draws
    from its own resamples, averaged index by index)."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(np.mean(np.stack(draws), axis=0), [tail, 100 - tail])
    return float(low), float(high)
