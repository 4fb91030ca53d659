"""Metrics of one attack's scores, as the design's ``metrics.json`` defines them.

- ``auc``: ROC-AUC (ties count one half), from ranks.
- ``auc_ci``: 95 % percentile interval over 1,000 seeded bootstrap resamples. Members and non-members
  are resampled separately (stratified), so every resample has both classes in the split's proportions.
- ``tpr_at_0.1pct_fpr`` / ``tpr_at_1pct_fpr``: the highest TPR among ROC points whose FPR is strictly
  below the target (LiRA's rule, ``tpr[np.where(fpr<.001)[0][-1]]``: tensorflow/privacy
  ``research/mi_lira_2021/plot.py`` line 165 at 03035d5), without interpolation, compared in integers
  (fp * 1000 < N at 0.1 %: an FPR of exactly the target does not count); ``None`` when there are fewer
  than 1 / target non-members (the rate cannot be measured).
  The chosen threshold is the highest one reaching that TPR (its fp is the fewest). Each has
  ``<name>_ci``, the two-sided 95 % Clopper-Pearson interval of that TPR (its tp of the members);
  ``<name>_fpr_bound``, the one-sided 95 % Clopper-Pearson upper bound on the threshold's true FPR (its
  fp of the N non-members); ``<name>_few``, True when N < 10 / target (fewer than 10 expected false
  positives: "few non-members"); all three ``None`` where the TPR is.
- ``tpr_at_0fp``: the TPR at the strictest threshold, above every non-member ("TPR at 0 false positives
  of N"), with ``tpr_at_0fp_ci`` (as above) and ``tpr_at_0fp_fpr_bound`` = 1 - 0.05 ** (1 / N).
- ``roc``: the ROC points ``[[fpr, tpr], ...]`` for plotting.
- with duplication (some members trained several times): ``auc_repeated`` and ``auc_singleton``, the
  repeated members' and the once-trained members' AUC against all non-members;
  ``auc_repeated_vs_singleton``, how well the score ranks repeated members above singletons (0.5: no
  difference); ``auc_by_repeats``, times trained (1, then each group's) → that group's AUC against the
  non-members; ``n_repeated``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

FPR_TARGETS = {"tpr_at_0.1pct_fpr": 0.001, "tpr_at_1pct_fpr": 0.01}


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis, tied values sharing the mean of their ranks (what
    ``scipy.stats.rankdata`` gives for finite values; numpy alone keeps scipy's second of import out
    of every process that runs attacks)."""
    order = np.argsort(x, axis=-1, kind="stable")
    ordered = np.take_along_axis(x, order, -1)
    n = x.shape[-1]
    position = np.broadcast_to(np.arange(n), x.shape)
    starts = np.ones(x.shape, bool)  # first of a run of equal values
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    ends = np.ones(x.shape, bool)  # last of a run
    ends[..., :-1] = starts[..., 1:]
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, position, n), -1), axis=-1), -1)
    ranks = np.empty(x.shape, np.float64)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, -1)
    return ranks


def auc_from_ranks(member: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """ROC-AUC of ``scores`` (last axis = samples; leading axes batch resamples) for labels ``member``."""
    ranks = average_ranks(scores)
    positives = member.sum(-1)
    negatives = member.shape[-1] - positives
    rank_sum = (ranks * member).sum(-1)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def roc_counts(member: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Threshold (member when score >= it), true and false positives at every distinct threshold, from
    (inf, 0, 0) to (lowest score, members, non-members)."""
    order = np.argsort(-scores, kind="mergesort")
    s, m = scores[order], member[order]
    last_of_tie = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tp, fp = np.cumsum(m)[last_of_tie], np.cumsum(~m)[last_of_tie]
    return np.r_[np.inf, s[last_of_tie]], np.r_[0, tp], np.r_[0, fp]


def roc_points(member: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FPR and TPR at every distinct threshold, from (0, 0) to (1, 1)."""
    _, tp, fp = roc_counts(member, scores)
    return fp / max(1, fp[-1]), tp / max(1, tp[-1])


def _exact(target: float) -> tuple[int, int]:
    """``target`` as the fraction its decimal spells (0.001 -> 1, 1000), to compare rates in integers."""
    return Fraction(str(target)).as_integer_ratio()


def operating_point(tp: np.ndarray, fp: np.ndarray, n_nonmembers: int, target: float) -> int | None:
    """Index of the ROC point read as "TPR at ``target`` FPR": the highest TPR among points with
    fp / n_nonmembers strictly below ``target`` (exact, in integers), at the highest threshold reaching
    it; None when n_nonmembers < 1 / target. ``tp``, ``fp``: counts (or any non-decreasing TPR for tp)."""
    num, den = _exact(target)
    if n_nonmembers * num < den:
        return None
    below = np.asarray(fp, np.int64) * den < num * n_nonmembers  # a prefix: fp never decreases
    return int(np.argmax(tp == tp[below].max()))


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float, n_nonmembers: int) -> float | None:
    """Highest TPR with FPR strictly below target (no interpolation); None when n_nonmembers < 1 / target.
    FPRs are turned back into counts, fp = fpr * n_nonmembers (rounded)."""
    i = operating_point(np.asarray(tpr), np.rint(np.asarray(fpr) * n_nonmembers), n_nonmembers, target)
    return None if i is None else float(tpr[i])


def clopper_pearson(k: int, n: int, level: float = 0.95) -> list[float]:
    """Two-sided exact (Clopper-Pearson) interval of a proportion k / n."""
    from scipy.stats import binomtest  # lazily: see average_ranks

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="exact")
    return [float(ci.low), float(ci.high)]


def fpr_upper_bound(fp: int, n: int, level: float = 0.95) -> float:
    """One-sided exact (Clopper-Pearson) upper bound on a rate seen as fp of n: 1 - (1 - level) ** (1 / n)
    at fp = 0, 1 at fp = n, else the ``level`` quantile of Beta(fp + 1, n - fp)."""
    if fp == 0:
        return float(1 - (1 - level) ** (1 / n))
    if fp >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(level, fp + 1, n - fp))


def resampled_aucs(
    pos: np.ndarray, neg: np.ndarray, pick_pos: np.ndarray, pick_neg: np.ndarray
) -> np.ndarray:
    """AUC of each resample (row) of member scores ``pos[pick_pos]`` against non-member scores
    ``neg[pick_neg]``, ties counting one half, in O(m + n) per resample instead of a sort: a resample is
    a count of draws of each original score, and a member beats the draws of the non-members below it.
    The counts are integers and halves, so each AUC is the exact fraction the ranks give, bit for bit."""
    resamples, m, n = pick_pos.shape[0], len(pos), len(neg)
    rows = np.arange(resamples)[:, None]
    draws_pos = np.bincount((pick_pos + rows * m).ravel(), minlength=resamples * m).reshape(resamples, m)
    order = np.argsort(neg, kind="stable")
    rank_of = np.empty(n, np.int64)
    rank_of[order] = np.arange(n)
    sorted_draws = np.bincount((rank_of[pick_neg] + rows * n).ravel(), minlength=resamples * n)
    below = np.zeros((resamples, n + 1), np.float64)  # draws of the non-members below each sorted place
    np.cumsum(sorted_draws.reshape(resamples, n), axis=1, out=below[:, 1:])
    ordered = neg[order]
    low, high = np.searchsorted(ordered, pos, "left"), np.searchsorted(ordered, pos, "right")
    beaten = below[:, low] + 0.5 * (below[:, high] - below[:, low])  # (resamples, m): ties one half
    return (draws_pos * beaten).sum(axis=1) / (m * n)


def bootstrap_auc_ci(
    member: np.ndarray, scores: np.ndarray, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the AUC over stratified bootstrap resamples."""
    rng = np.random.default_rng(seed)
    pos, neg = scores[member], scores[~member]
    pick_pos = rng.integers(0, len(pos), size=(resamples, len(pos)))
    pick_neg = rng.integers(0, len(neg), size=(resamples, len(neg)))
    aucs = resampled_aucs(pos, neg, pick_pos, pick_neg)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(aucs, [tail, 100 - tail])
    return float(low), float(high)


def attack_metrics(member: Any, scores: Any, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Every metric of one attack's ``scores`` (higher = member) against the ``member`` labels."""
    member = np.asarray(member, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    if member.all() or not member.any():
        raise ValueError("metrics need both members and non-members")
    if not np.isfinite(scores).all():
        raise ValueError(f"{int((~np.isfinite(scores)).sum())} score(s) are not finite")
    _, tp, fp = roc_counts(member, scores)
    n_members, n_nonmembers = int(tp[-1]), int(fp[-1])
    fpr, tpr = fp / n_nonmembers, tp / n_members
    low, high = bootstrap_auc_ci(member, scores, resamples, seed)
    out: dict[str, Any] = {
        "auc": float(auc_from_ranks(member, scores)),
        "auc_ci": [low, high],
        "n_members": n_members,
        "n_nonmembers": n_nonmembers,
    }
    for name, target in FPR_TARGETS.items():
        i, (num, den) = operating_point(tp, fp, n_nonmembers, target), _exact(target)
        out[name] = None if i is None else float(tpr[i])
        out[f"{name}_ci"] = None if i is None else clopper_pearson(tp[i], n_members)
        out[f"{name}_fpr_bound"] = None if i is None else fpr_upper_bound(fp[i], n_nonmembers)
        out[f"{name}_few"] = None if i is None else n_nonmembers * num < 10 * den  # N < 10 / target
    i = int(np.argmax(tp == tp[fp == 0].max()))  # fp == 0 always holds at the first point
    out["tpr_at_0fp"] = float(tpr[i])
    out["tpr_at_0fp_ci"] = clopper_pearson(tp[i], n_members)
    out["tpr_at_0fp_fpr_bound"] = fpr_upper_bound(0, n_nonmembers)
    out["roc"] = [[round(float(f), 6), round(float(t), 6)] for f, t in zip(fpr, tpr, strict=True)]
    return out


def duplication_metrics(member: Any, scores: Any, times: Any) -> dict[str, Any]:
    """Repeated members against singletons of the same run; ``times``: how many times each scored sample
    was trained (0 for a non-member)."""
    member, times = np.asarray(member, dtype=bool), np.asarray(times, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    repeated, singleton = member & (times > 1), member & (times <= 1)

    def auc(positive: np.ndarray, negative: np.ndarray) -> float | None:
        if not positive.any() or not negative.any():
            return None
        keep = positive | negative
        return float(auc_from_ranks(positive[keep], scores[keep]))

    return {
        "auc_repeated": auc(repeated, ~member),
        "auc_singleton": auc(singleton, ~member),
        "auc_repeated_vs_singleton": auc(repeated, singleton),
        "auc_by_repeats": {
            str(r): auc(member & (np.maximum(times, 1) == r), ~member)
            for r in sorted({1, *times[repeated].tolist()})
        },  # fmt: skip
        "n_repeated": int(repeated.sum()),
    }


def rates(name: str, verdicts: np.ndarray, member: np.ndarray) -> dict[str, Any]:
    """``<name>_members`` and ``<name>_nonmembers`` (rates with Clopper-Pearson intervals) and
    ``<name>_difference`` with Newcombe's interval; None where a side has no record."""
    from statsmodels.stats.proportion import confint_proportions_2indep  # imported here: heavy

    hits = (
        (int(verdicts[member].sum()), int(member.sum())),
        (int(verdicts[~member].sum()), int((~member).sum())),
    )
    out: dict[str, Any] = {}
    for side, (k, n) in zip(("members", "nonmembers"), hits, strict=True):
        out[f"{name}_{side}"] = k / n if n else None
        out[f"{name}_{side}_ci"] = clopper_pearson(k, n) if n else None
    (k1, n1), (k0, n0) = hits
    if n1 and n0:
        low, high = confint_proportions_2indep(k1, n1, k0, n0, method="newcomb", compare="diff")
        out[f"{name}_difference"] = k1 / n1 - k0 / n0
        out[f"{name}_difference_ci"] = [float(low), float(high)]
    else:
        out[f"{name}_difference"] = out[f"{name}_difference_ci"] = None
    return out
