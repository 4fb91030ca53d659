"""Block-level ranking statistics: which adaptation techniques leak more, over (model, dataset) blocks.

A *block* is one (model, dataset) pair; within it every technique has one attack AUC (higher = leaks
more). ``matrix`` is always a (n_blocks, k) array of AUCs and ``names`` the k technique names. Rank 1 is
the highest AUC of a block (the leakiest); ties share their average rank (``scipy.stats.rankdata`` of
``-matrix`` along each row). Every test is a maintained library function; this module only arranges
the inputs and names the outputs.

- ``mean_ranks`` / ``friedman``: Friedman (1937), "The use of ranks to avoid the assumption of normality
  implicit in the analysis of variance", JASA 32(200); ``scipy.stats.friedmanchisquare`` (chi-square
  approximation, tie-corrected).
- ``rank_ranges``: each technique's mean rank with the lowest and highest rank it took in any block. A
  range, not a confidence interval: with the 2-6 blocks a sweep has, a percentile bootstrap over blocks
  labelled 95 % covered the expected rank far less often (0.86 at 6 blocks, 0.48 at 2 in a simulation;
  ``tests/test_ranking.py`` repeats it), and the range is what the blocks show without a claim.
- ``nemenyi_cd``: Nemenyi (1963), "Distribution-free multiple comparisons", PhD thesis, Princeton, as
  used by Demšar (2006), "Statistical comparisons of classifiers over multiple data sets", JMLR 7;
  ``q_alpha`` from ``scipy.stats.studentized_range.ppf`` with infinite degrees of freedom.
- ``pairwise_wilcoxon``: Wilcoxon (1945), "Individual comparisons by ranking methods", Biometrics
  Bulletin 1(6), ``scipy.stats.wilcoxon``; Holm (1979), Scand. J. Statist. 6, through
  ``statsmodels.stats.multitest.multipletests(method="holm")``. Pairwise signed-rank tests instead of
  mean-rank post-hoc tests follow Benavoli, Corani & Mangili (2016), "Should we really use post-hoc
  tests based on mean-ranks?", JMLR 17(5).
- ``page_trend`` / ``class_matrix``: Page (1963), "Ordered hypotheses for multiple treatments: a
  significance test for linear ranks", JASA 58(301); ``scipy.stats.page_trend_test``.
- ``random_effects``: DerSimonian & Laird (1986), Controlled Clinical Trials 7(3) or Paule & Mandel
  (1982), J. Res. Natl. Bur. Stand. 87(5) for tau^2; the interval of Hartung & Knapp (2001), Stat. Med.
  20(24) and Sidik & Jonkman (2002), Stat. Med. 21(21), with Knapp & Hartung's (2003) ad hoc modification
  (Stat. Med. 22(17); metafor's ``test="adhoc"``): the variance scale is max(1, q), so the interval is
  never narrower than the unadjusted one; ``statsmodels.stats.meta_analysis.combine_effects``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

# statsmodels' names for the tau^2 estimators (``combine_effects(method_re=...)``) and what they are.
_TAU2_METHODS = {"PM": ("iterated", "Paule-Mandel"), "DL": ("chi2", "DerSimonian-Laird")}
HKSJ = "Hartung-Knapp-Sidik-Jonkman (t, k - 1 df)"
HKSJ_TRUNCATED = "Hartung-Knapp-Sidik-Jonkman, scale max(1, q) (t, k - 1 df)"


def _present(value: Any) -> bool:
    return isinstance(value, int | float | np.floating | np.integer) and math.isfinite(value)


def coverage(values: dict[Hashable, dict[str, float]]) -> dict[str, int]:
    """Blocks in which each technique has a finite AUC, by technique name (sorted)."""
    names = sorted({name for row in values.values() for name in row})
    return {name: sum(_present(row.get(name)) for row in values.values()) for name in names}


def complete_blocks(
    values: dict[Hashable, dict[str, float]], techniques: Sequence[str] | None = None
) -> tuple[list, list[str], np.ndarray]:
    """The complete (blocks x techniques) table the block-level tests need.

    Args:
        values: block -> technique -> AUC. A missing or non-finite AUC counts as absent.
        techniques: the techniques to keep. ``None`` keeps those present in every block.

    Returns:
        ``(blocks, names, matrix)``: the blocks in which every kept technique is present, sorted; the
        kept names, sorted; and their (len(blocks), len(names)) AUCs.
    """
    if techniques is None:
        present = [{name for name, value in row.items() if _present(value)} for row in values.values()]
        names = sorted(set.intersection(*present)) if present else []
    else:
        names = sorted(set(techniques))
    blocks = [b for b, row in values.items() if all(_present(row.get(name)) for name in names)]
    try:
        blocks.sort()  # type: ignore[call-arg]  # blocks of one kind compare; mixed kinds raise, handled below
    except TypeError:  # blocks of mixed types: still a fixed order
        blocks.sort(key=repr)
    matrix = np.array([[float(values[b][name]) for name in names] for b in blocks], dtype=np.float64)
    return blocks, names, matrix.reshape(len(blocks), len(names))


def _check(matrix: ArrayLike) -> np.ndarray:
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"need a (n_blocks, k) matrix of AUCs with both at least 1, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError("the AUC matrix has non-finite entries; use complete_blocks first")
    return m


def block_ranks(matrix: ArrayLike) -> np.ndarray:
    """(n_blocks, k) ranks within each block: 1 = highest AUC, ties averaged."""
    return stats.rankdata(-_check(matrix), axis=1)


def mean_ranks(matrix: ArrayLike) -> np.ndarray:
    """(k,) mean rank of each technique over the blocks (1 = always the leakiest)."""
    return block_ranks(matrix).mean(axis=0)


def rank_ranges(matrix: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean ranks with the range of ranks over blocks (no coverage claimed: see the module docstring).

    Returns:
        ``(mean_ranks, lowest, highest)``, each (k,): the mean, smallest and largest within-block rank.
    """
    ranks = block_ranks(matrix)
    return ranks.mean(axis=0), ranks.min(axis=0), ranks.max(axis=0)


def friedman(matrix: ArrayLike) -> dict[str, Any]:
    """Friedman's test that all techniques have the same rank distribution within blocks.

    Returns:
        ``statistic`` (tie-corrected chi-square), ``p_value`` (chi-square, ``df`` = k - 1),
        ``df``, ``n_blocks`` and ``k``.

    Raises:
        ValueError: with fewer than three techniques (scipy's test is undefined there; compare two
            with ``pairwise_wilcoxon``).
    """
    m = _check(matrix)
    if m.shape[1] < 3:
        raise ValueError(f"Friedman's test needs at least 3 techniques, got {m.shape[1]}")
    result = stats.friedmanchisquare(*m.T)
    n, k = m.shape
    return dict(statistic=float(result.statistic), p_value=float(result.pvalue), df=k - 1, n_blocks=n, k=k)


def pairwise_wilcoxon(matrix: ArrayLike, names: Sequence[str], alpha: float = 0.05) -> list[dict[str, Any]]:
    """Two-sided Wilcoxon signed-rank test of every pair of techniques over blocks, Holm-corrected.

    scipy's ``method="auto"`` is exact for up to 50 blocks without ties or zero differences, an
    exhaustive permutation test for up to 13 blocks with them, and the normal approximation otherwise.
    Zero differences are dropped (``zero_method="wilcox"``). The smallest attainable exact two-sided p
    with n non-zero differences is ``2 / 2**n``: 0.0625 for 5 blocks, 0.03125 for 6, so fewer than 6
    blocks can never reach 0.05, and Holm over several pairs needs more. All differences zero gives
    ``p = 1``. Equal AUCs must be exactly equal: round AUCs computed differently before comparing.

    Args:
        matrix: (n_blocks, k) AUCs.
        names: the k technique names, in column order.
        alpha: family-wise error rate of ``significant``.

    Returns:
        One dict per pair (a, b) of columns a < b: ``a``, ``b``, ``median_difference`` (of a - b),
        ``statistic`` (scipy's: the smaller signed-rank sum), ``n_nonzero``, ``p_value``, ``p_holm``
        and ``significant`` (Holm rejects at ``alpha``).
    """
    m = _check(matrix)
    if len(names) != m.shape[1]:
        raise ValueError(f"{len(names)} names for {m.shape[1]} columns")
    rows = []
    for i, j in itertools.combinations(range(m.shape[1]), 2):
        d = m[:, i] - m[:, j]
        nonzero = int(np.count_nonzero(d))
        if nonzero == 0:
            statistic, p = 0.0, 1.0
        else:
            result = stats.wilcoxon(m[:, i], m[:, j])
            statistic, p = float(result.statistic), float(result.pvalue)
        row = {"a": names[i], "b": names[j], "median_difference": float(np.median(d)), "statistic": statistic}
        rows.append({**row, "n_nonzero": nonzero, "p_value": p})
    if rows:
        from statsmodels.stats.multitest import multipletests

        reject, p_holm, _, _ = multipletests([row["p_value"] for row in rows], alpha=alpha, method="holm")
        for row, adjusted, rejected in zip(rows, p_holm, reject, strict=True):
            row["p_holm"] = float(adjusted)
            row["significant"] = bool(rejected)
    return rows


def nemenyi_cd(k: int, n_blocks: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical difference of mean ranks (Demšar 2006).

    ``CD = q_alpha * sqrt(k (k + 1) / (6 n))`` with ``q_alpha`` the studentized range quantile (k
    groups, infinite df) over sqrt(2): 1.960, 2.343, 2.569, ... for k = 2, 3, 4 at alpha = 0.05.
    """
    if k < 2 or n_blocks < 1:
        raise ValueError(f"need k >= 2 techniques and at least one block, got k={k}, n={n_blocks}")
    q_alpha = stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q_alpha * math.sqrt(k * (k + 1) / (6 * n_blocks)))


def class_matrix(
    matrix: ArrayLike, names: Sequence[str], classes: dict[str, str], order: Sequence[str]
) -> np.ndarray:
    """Per-block mean AUC of each class of techniques, columns in ``order``.

    ``classes`` maps technique names to classes; techniques without a class in ``order`` are left out.

    Raises:
        ValueError: a class in ``order`` has none of ``names``.
    """
    m = _check(matrix)
    if len(names) != m.shape[1]:
        raise ValueError(f"{len(names)} names for {m.shape[1]} columns")
    columns = []
    for label in order:
        members = [j for j, name in enumerate(names) if classes.get(name) == label]
        if not members:
            raise ValueError(f"class {label!r} has no technique among {list(names)}")
        columns.append(m[:, members].mean(axis=1))
    return np.stack(columns, axis=1)


def page_trend(matrix_of_classes: ArrayLike, predicted_order: Sequence[int] | None = None) -> dict[str, Any]:
    """Page's L test that the classes' AUCs increase in a predicted order, within blocks.

    Args:
        matrix_of_classes: (n_blocks, n_classes) per-block AUC of each class (``class_matrix``).
        predicted_order: column indices from the LOWEST predicted AUC to the highest; ``None`` when the
            columns are already in that order (``class_matrix(..., order=lowest_to_highest)``).

    Returns:
        ``L``, one-sided ``p_value``, ``method`` (scipy's choice: ``"exact"`` for small tables, else
        ``"asymptotic"``), ``n_blocks`` and ``k``.
    """
    m = _check(matrix_of_classes)
    n, k = m.shape
    if k < 3 or n < 2:
        raise ValueError(f"Page's test needs at least 3 classes and 2 blocks, got shape {m.shape}")
    order = list(range(k)) if predicted_order is None else [int(i) for i in predicted_order]
    if sorted(order) != list(range(k)):
        raise ValueError(f"predicted_order {order} is not a permutation of the {k} columns")
    predicted_ranks = np.empty(k, dtype=int)
    predicted_ranks[order] = np.arange(1, k + 1)
    result = stats.page_trend_test(m, predicted_ranks=predicted_ranks)
    statistic, p = float(result.statistic), float(result.pvalue)
    return {"L": statistic, "p_value": p, "method": str(result.method), "n_blocks": n, "k": k}


def random_effects(
    effects: ArrayLike,
    variances: ArrayLike,
    level: float = 0.95,
    tau2_method: str = "PM",
    truncate: bool = True,
) -> dict[str, Any]:
    """Random-effects pooled estimate with the Hartung-Knapp-Sidik-Jonkman (HKSJ) interval.

    tau^2 is the Paule-Mandel estimate by default (metafor ``method="PM"``; statsmodels'
    ``method_re="iterated"``, iterated to 1e-10), or DerSimonian-Laird with ``tau2_method="DL"``
    (``method_re="chi2"``), truncated at 0 as metafor does (then the estimate is the fixed-effect
    one, which statsmodels also reports). The HKSJ variance is the unadjusted variance 1 / sum(w) times
    the scale q = sum(w (y - mu)^2) / (k - 1) (statsmodels 0.15 ``stats/meta_analysis.py``, lines
    697-700: ``scale_hksj_*`` and ``var_hksj_* = scale * var_eff_w_*``), with a t quantile on k - 1 df.
    When the effects agree more closely than their variances say (q < 1, e.g. tau^2 = 0 with nearly equal
    effects), the untruncated interval is narrower than the fixed-effect one; ``truncate`` (the default)
    uses max(1, q), Knapp & Hartung's (2003) ad hoc modification, metafor's ``test="adhoc"``, so the
    interval is never narrower than the unadjusted one (Röver, Knapp & Friede 2015, BMC Med. Res.
    Methodol. 15:99, recommend it with few studies). ``truncate=False`` is metafor's ``test="knha"``.
    With PM the scale is 1 at convergence whenever tau^2 > 0, so only the quantile changes there.

    Args:
        effects: (k,) effect estimates (e.g. AUC differences per study).
        variances: (k,) their sampling variances, all > 0.
        level: interval coverage.
        tau2_method: ``"PM"`` or ``"DL"``.
        truncate: scale the variance by max(1, q) instead of q.

    Returns:
        ``estimate``, ``se``, ``ci_low``, ``ci_high``, ``tau2``, ``k``, ``df``, two-sided ``p_value``,
        ``hksj_scale`` (q, before truncation), ``level``, ``tau2_method`` and ``interval_method``. With
        k = 1 the single effect comes back with its normal interval, ``tau2 = None``, ``df = None`` and
        ``hksj_scale = None`` (nothing to pool, no heterogeneity to estimate).
    """
    from statsmodels.stats.meta_analysis import combine_effects

    y = np.asarray(effects, dtype=np.float64).ravel()
    v = np.asarray(variances, dtype=np.float64).ravel()
    if y.size == 0 or y.shape != v.shape or not (np.isfinite(y).all() and np.isfinite(v).all()):
        raise ValueError("need as many finite effects as variances, at least one")
    if (v <= 0).any():
        raise ValueError("sampling variances must be positive")
    if tau2_method not in _TAU2_METHODS:
        raise ValueError(f"tau2_method must be one of {sorted(_TAU2_METHODS)}, got {tau2_method!r}")
    labels: tuple[str | None, str]  # the tau^2 estimator (none for one effect) and the interval's method
    if y.size == 1:  # nothing to pool and no heterogeneity to estimate
        estimate, se, tau2, df, labels = float(y[0]), math.sqrt(v[0]), None, None, (None, "normal")
        scale, quantile = None, stats.norm.isf((1 - level) / 2)
        p = float(2 * stats.norm.sf(abs(estimate) / se))
    else:
        method_re, label = _TAU2_METHODS[tau2_method]
        options = {"atol": 1e-10, "maxiter": 500} if method_re == "iterated" else {}
        # A negative raw DL tau^2 can make statsmodels' random-effects weights invalid; those are unused.
        with np.errstate(divide="ignore", invalid="ignore"):
            res = combine_effects(y, v, method_re=method_re, use_t=True, alpha=1 - level, **options)
        if res.tau2 > 0:
            estimate, unadjusted, scale, tau2 = (
                res.mean_effect_re,
                res.var_eff_w_re,
                res.scale_hksj_re,
                res.tau2,
            )
        else:  # tau^2 truncated at 0: the random-effects model is the fixed-effect one
            estimate, unadjusted, scale, tau2 = res.mean_effect_fe, res.var_eff_w_fe, res.scale_hksj_fe, 0.0
        scale = float(scale)
        df, labels = y.size - 1, (label, HKSJ_TRUNCATED if truncate else HKSJ)
        se = math.sqrt((max(1.0, scale) if truncate else scale) * unadjusted)
        quantile = stats.t.isf((1 - level) / 2, df)
        # All effects equal (untruncated): the HKSJ variance is 0, the interval collapses and p is 0 or 1.
        p = float(2 * stats.t.sf(abs(estimate) / se, df)) if se > 0 else float(estimate == 0)
    tau2 = None if tau2 is None else float(tau2)
    low, high = estimate - quantile * se, estimate + quantile * se
    interval = dict(estimate=float(estimate), se=float(se), ci_low=float(low), ci_high=float(high), tau2=tau2)
    return {
        **interval,
        "k": int(y.size),
        "df": df,
        "p_value": p,
        "hksj_scale": scale,
        "level": level,
        "tau2_method": labels[0],
        "interval_method": labels[1],
    }
