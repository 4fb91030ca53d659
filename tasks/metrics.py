"""Metrics of one attack's scores, as the design's ``metrics.json`` defines them.

- ``auc``: ROC-AUC (ties count one half), from ranks.
- ``auc_ci``: 95 % percentile interval over 1,000 seeded bootstrap resamples. Members and non-members
  are resampled separately (stratified), so every resample has both classes in the split's proportions.
- ``tpr_at_0.1pct_fpr`` / ``tpr_at_1pct_fpr``: the highest TPR among ROC points whose FPR is at most the
  target, without interpolation; ``None`` when there are fewer than 1 / target non-members (the rate
  cannot be measured).
- ``roc``: the ROC points ``[[fpr, tpr], ...]`` for plotting.
- with duplication (some members trained several times): ``auc_repeated`` and ``auc_singleton``, the
  repeated members' and the once-trained members' AUC against all non-members;
  ``auc_repeated_vs_singleton``, how well the score ranks repeated members above singletons (0.5: no
  difference); ``auc_by_repeats``, times trained (1, then each group's) → that group's AUC against the
  non-members; ``n_repeated``.
"""

from __future__ import annotations

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


def roc_points(member: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FPR and TPR at every distinct threshold, from (0, 0) to (1, 1)."""
    order = np.argsort(-scores, kind="mergesort")
    s, m = scores[order], member[order]
    last_of_tie = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tp = np.cumsum(m)[last_of_tie]
    fp = np.cumsum(~m)[last_of_tie]
    tpr = np.r_[0.0, tp / max(1, m.sum())]
    fpr = np.r_[0.0, fp / max(1, (~m).sum())]
    return fpr, tpr


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float, n_nonmembers: int) -> float | None:
    """Highest TPR with FPR <= target (no interpolation); None when n_nonmembers < 1 / target."""
    if n_nonmembers < round(1 / target):
        return None
    return float(tpr[fpr <= target + 1e-12].max())


def bootstrap_auc_ci(
    member: np.ndarray, scores: np.ndarray, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the AUC over stratified bootstrap resamples."""
    rng = np.random.default_rng(seed)
    pos, neg = scores[member], scores[~member]
    pick_pos = rng.integers(0, len(pos), size=(resamples, len(pos)))
    pick_neg = rng.integers(0, len(neg), size=(resamples, len(neg)))
    resampled = np.concatenate([pos[pick_pos], neg[pick_neg]], axis=1)
    labels = np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)]
    aucs = auc_from_ranks(np.broadcast_to(labels, resampled.shape), resampled)
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
    fpr, tpr = roc_points(member, scores)
    n_nonmembers = int((~member).sum())
    low, high = bootstrap_auc_ci(member, scores, resamples, seed)
    out: dict[str, Any] = {
        "auc": float(auc_from_ranks(member, scores)),
        "auc_ci": [low, high],
        "n_members": int(member.sum()),
        "n_nonmembers": n_nonmembers,
    }
    for name, target in FPR_TARGETS.items():
        out[name] = tpr_at_fpr(fpr, tpr, target, n_nonmembers)
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
