"""Metrics as the design defines them: AUC, its bootstrap CI, TPR at low FPR (LiRA's strict rule) with
exact intervals, ROC points."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy.stats import beta, binomtest, norm
from sklearn.metrics import roc_auc_score

from privauditor.tasks.stats.metrics import (
    attack_metrics,
    average_ranks,
    clopper_pearson,
    fpr_upper_bound,
    operating_point,
    roc_counts,
    roc_points,
    tpr_at_fpr,
)


def labels(members, nonmembers):
    return np.r_[np.ones(members, bool), np.zeros(nonmembers, bool)]


def test_auc_matches_sklearn_with_ties():
    rng = np.random.default_rng(1)
    member = rng.random(300) < 0.5
    scores = np.round(rng.normal(size=300) + member * 0.5, 1)  # many ties
    assert attack_metrics(member, scores)["auc"] == pytest.approx(roc_auc_score(member, scores))


@pytest.mark.parametrize("shape", [(1,), (9,), (300,), (40, 25), (3, 4, 11)])
def test_average_ranks_match_scipy_with_and_without_ties(shape):
    from scipy.stats import rankdata

    rng = np.random.default_rng(sum(shape))
    for x in (rng.normal(size=shape), rng.integers(0, 4, shape).astype(float)):
        assert np.array_equal(average_ranks(x), rankdata(x, axis=-1))


@pytest.mark.parametrize(("scores", "auc"), [([3, 2, 1, 0], 1.0), ([0, 1, 2, 3], 0.0), ([1, 1, 1, 1], 0.5)])
def test_auc_extremes(scores, auc):
    assert attack_metrics(labels(2, 2), np.array(scores, float), resamples=50)["auc"] == auc


def test_bootstrap_ci_is_seeded_and_brackets_the_auc():
    rng = np.random.default_rng(2)
    member = labels(100, 100)
    scores = rng.normal(size=200) + member * 0.6
    first, second = attack_metrics(member, scores), attack_metrics(member, scores)
    low, high = first["auc_ci"]
    assert first["auc_ci"] == second["auc_ci"] and low < first["auc"] < high and high - low < 0.25
    assert attack_metrics(member, scores, seed=1)["auc_ci"] != first["auc_ci"]


def test_tpr_at_fpr_is_strictly_below_the_target_without_interpolation():
    # 200 non-members score 0..199; members: 3 above every non-member, one between the top two non-members
    # (198.5) and one between the second and third (197.5): the ROC point (2 / 200 = 1 %, 5 / 100) sits
    # exactly at the 1 % target. The old <= rule took it; LiRA's fpr < target takes (1 / 200, 4 / 100).
    members = np.array([300.0, 301.0, 302.0, 198.5, 197.5] + [0.5] * 95)
    member, scores = labels(100, 200), np.r_[members, np.arange(200, dtype=float)]
    fpr, tpr = roc_points(member, scores)
    assert tpr[fpr <= 0.01 + 1e-12].max() == pytest.approx(0.05)  # what the <= rule read
    metrics = attack_metrics(member, scores, resamples=50)
    assert metrics["tpr_at_1pct_fpr"] == pytest.approx(0.04) == tpr_at_fpr(fpr, tpr, 0.01, 200)
    # the threshold used has 1 false positive of 200 (the <= rule's had 2)
    assert metrics["tpr_at_1pct_fpr_fpr_bound"] == pytest.approx(beta.ppf(0.95, 2, 199))
    assert metrics["tpr_at_1pct_fpr_fpr_bound"] != pytest.approx(fpr_upper_bound(2, 200))
    assert metrics["tpr_at_1pct_fpr_ci"] == pytest.approx(clopper_pearson(4, 100))
    assert metrics["tpr_at_1pct_fpr_few"] is True  # 200 < 10 / 1 %
    for key in ("", "_ci", "_fpr_bound", "_few"):  # 200 non-members cannot measure 0.1 %
        assert metrics[f"tpr_at_0.1pct_fpr{key}"] is None
    # no non-member at or above the threshold: the 3 members above all of them
    assert metrics["tpr_at_0fp"] == pytest.approx(0.03)
    assert metrics["tpr_at_0fp_ci"] == pytest.approx(clopper_pearson(3, 100))
    assert metrics["tpr_at_0fp_fpr_bound"] == pytest.approx(1 - 0.05 ** (1 / 200))
    assert tpr_at_fpr(fpr, tpr, 0.001, n_nonmembers=1000) == pytest.approx(0.03)  # FPRs read as fp of 1000
    assert json.loads(json.dumps(metrics)) == metrics  # metrics.json round-trips (plain bools and floats)


@pytest.mark.parametrize("n", [100, 700, 1000, 2900, 3000, 7000, 29000, 100_000])
@pytest.mark.parametrize("target", [0.01, 0.001])
def test_an_fpr_of_exactly_the_target_is_not_below_it_in_floats_either(n, target):
    fp = np.arange(n + 1)
    if n < round(1 / target):
        assert operating_point(fp, fp, n, target) is None
        return
    exactly = round(target * n)  # fp / n == target
    assert operating_point(fp, fp, n, target) == exactly - 1  # tp = fp: the last point below
    assert tpr_at_fpr(fp / n, fp / n, target, n) == pytest.approx((exactly - 1) / n)


def test_among_equal_tprs_the_highest_threshold_is_chosen():
    tp, fp = np.array([0, 2, 3, 3, 3, 4]), np.array([0, 0, 0, 1, 2, 3])  # tp stays 3 for fp 0..2
    assert operating_point(tp, fp, 300, 0.01) == 2  # fp < 3 allows fp 2; TPR 3 is reached at fp 0


def test_clopper_pearson_against_published_values():
    # Conover, Practical Nonparametric Statistics (1999) tables: 5 of 25 -> 0.068 to 0.407 (as quoted in
    # influentialpoints.com's "confidence intervals of proportions", which also matches R's binom.exact)
    assert clopper_pearson(5, 25) == pytest.approx([0.068, 0.407], abs=5e-4)
    # 7 of 20 -> [0.1539, 0.5922], and the beta quantiles that define the interval
    assert clopper_pearson(7, 20) == pytest.approx([0.1539, 0.5922], abs=5e-5)
    assert clopper_pearson(7, 20) == pytest.approx([beta.ppf(0.025, 7, 14), beta.ppf(0.975, 8, 13)])
    for n in (20, 100, 1000, 10_000):  # 0 of n: [0, 1 - 0.025 ** (1 / n)]; n * upper -> -ln 0.025 = 3.69
        assert clopper_pearson(0, n) == pytest.approx([0.0, 1 - 0.025 ** (1 / n)], rel=1e-9)
        assert clopper_pearson(n, n) == pytest.approx([0.025 ** (1 / n), 1.0], rel=1e-9)
    assert clopper_pearson(0, 20)[1] == pytest.approx(0.1684, abs=5e-5)
    assert 10_000 * clopper_pearson(0, 10_000)[1] == pytest.approx(-math.log(0.025), rel=1e-3)


def test_one_sided_fpr_bound():
    for n in (100, 1000, 10_000):  # 0 of n: 1 - 0.05 ** (1 / n), the "rule of three" (3 / n)
        assert fpr_upper_bound(0, n) == 1 - 0.05 ** (1 / n) == pytest.approx(beta.ppf(0.95, 1, n))
        assert 2.95 < n * fpr_upper_bound(0, n) < -math.log(0.05) < 3.0  # rises to -ln 0.05 = 2.996
        for k in (1, 7, n // 10):  # scipy's one-sided exact interval gives the same bound
            upper = binomtest(k, n, alternative="less").proportion_ci(0.95, method="exact").high
            assert fpr_upper_bound(k, n) == pytest.approx(upper, rel=1e-9)
        assert fpr_upper_bound(n, n) == 1.0
    assert 10_000 * fpr_upper_bound(0, 10_000) == pytest.approx(-math.log(0.05), rel=2e-4)


@pytest.mark.parametrize(
    ("n_nonmembers", "few_1pct", "few_01pct"),
    [(99, None, None), (100, True, None), (999, True, None), (1000, False, True), (9999, False, True),
     (10_000, False, False)],
)  # fmt: skip
def test_few_nonmember_flags(n_nonmembers, few_1pct, few_01pct):
    rng = np.random.default_rng(n_nonmembers)
    member = labels(20, n_nonmembers)
    metrics = attack_metrics(member, rng.normal(size=member.size) + member, resamples=2)
    assert metrics["tpr_at_1pct_fpr_few"] is few_1pct and metrics["tpr_at_0.1pct_fpr_few"] is few_01pct
    for name in ("tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr"):
        assert (metrics[name] is None) == (metrics[f"{name}_few"] is None) == (metrics[f"{name}_ci"] is None)
    assert metrics["tpr_at_0fp_fpr_bound"] == pytest.approx(1 - 0.05 ** (1 / n_nonmembers))


def test_strict_rule_keeps_the_true_fpr_at_the_target_in_a_binormal_simulation():
    """Non-members N(0, 1), members N(2, 1): a threshold t's true FPR is exactly norm.sf(t)."""
    start = time.perf_counter()
    reps, n, p = 2000, 1000, 300
    rng = np.random.default_rng(0)
    scores = np.concatenate([rng.normal(2.0, 1.0, (reps, p)), rng.normal(0.0, 1.0, (reps, n))], axis=1)
    member = labels(p, n)
    figures = {}
    for target in (0.001, 0.01):
        true = {"strict": np.empty(reps), "le": np.empty(reps)}
        covered, tprs = np.empty(reps, bool), np.empty(reps)
        for r in range(reps):
            thresholds, tp, fp = roc_counts(member, scores[r])
            i = operating_point(tp, fp, n, target)
            le = int(np.argmax(tp == tp[fp <= target * n].max()))  # the old rule, same tie-break
            true["strict"][r], true["le"][r] = norm.sf(thresholds[i]), norm.sf(thresholds[le])
            covered[r], tprs[r] = true["strict"][r] <= fpr_upper_bound(int(fp[i]), n), tp[i] / p
        strict, le = true["strict"].mean(), true["le"].mean()
        figures[target] = (strict, le, covered.mean(), (true["strict"] >= target).mean(), tprs.mean())
        print(
            f"target {target:.1%}: mean true FPR strict {strict:.5f}, <= rule {le:.5f}; "
            f"fpr_bound covers {covered.mean():.4f}; strict true FPR >= target in "
            f"{(true['strict'] >= target).mean():.3f}, <= rule in {(true['le'] >= target).mean():.3f}; "
            f"mean TPR {tprs.mean():.4f}"
        )
        # the strict rule averages at the target (0.1 %: fp = 0, E = 1 / (n + 1) at most), the <= rule above
        assert strict < target * 1.05 and le > strict + 0.5 / n and covered.mean() >= 0.93
    assert figures[0.001][1] > 0.0018  # the <= rule: about 2 / (n + 1), twice the 0.1 % target
    assert figures[0.001][2] >= 0.94  # fp = 0: exactly >= 95 % in theory (true FPR <= the top non-member's)
    for r in range(3):  # attack_metrics reports what the loop above read
        metrics = attack_metrics(member, scores[r], resamples=2)
        thresholds, tp, fp = roc_counts(member, scores[r])
        i = operating_point(tp, fp, n, 0.001)
        assert metrics["tpr_at_0.1pct_fpr"] == tp[i] / p and fp[i] == 0
        assert (
            metrics["tpr_at_0.1pct_fpr_fpr_bound"] == metrics["tpr_at_0fp_fpr_bound"] == fpr_upper_bound(0, n)
        )
    print(f"simulation took {time.perf_counter() - start:.2f} s")


def test_roc_runs_from_origin_to_one_and_is_monotone():
    rng = np.random.default_rng(3)
    member = labels(50, 70)
    fpr, tpr = roc_points(member, rng.normal(size=120))
    assert (fpr[0], tpr[0]) == (0.0, 0.0) and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert (np.diff(fpr) >= 0).all() and (np.diff(tpr) >= 0).all()
    roc = attack_metrics(member, rng.normal(size=120))["roc"]
    assert roc[0] == [0.0, 0.0] and roc[-1] == [1.0, 1.0]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="both"):
        attack_metrics(np.ones(4, bool), np.arange(4.0))
    with pytest.raises(ValueError, match="not finite"):
        attack_metrics(labels(2, 2), np.array([1.0, np.nan, 0.0, 1.0]))


def test_resampled_aucs_by_counts_are_the_ranks_aucs_bit_for_bit():
    """The bootstrap's O(m + n) AUC of each resample (draw counts and cumulative sums) equals the rank
    formula on the resampled scores exactly, ties included, so every stored CI is the one ranks give."""
    from privauditor.tasks.stats.metrics import auc_from_ranks, resampled_aucs

    rng = np.random.default_rng(7)
    for m, n in ((2, 2), (3, 40), (57, 9), (280, 280)):
        pos, neg = np.round(rng.normal(size=m) + 0.4, 1), np.round(rng.normal(size=n), 1)  # many ties
        pick_pos, pick_neg = rng.integers(0, m, size=(64, m)), rng.integers(0, n, size=(64, n))
        resampled = np.concatenate([pos[pick_pos], neg[pick_neg]], axis=1)
        labels = np.broadcast_to(np.r_[np.ones(m, bool), np.zeros(n, bool)], resampled.shape)
        assert np.array_equal(resampled_aucs(pos, neg, pick_pos, pick_neg), auc_from_ranks(labels, resampled))
