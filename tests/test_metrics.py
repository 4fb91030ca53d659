"""Metrics as the design defines them: AUC, its bootstrap CI, TPR at low FPR, ROC points."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from privauditor.tasks.metrics import attack_metrics, average_ranks, roc_points, tpr_at_fpr


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


def test_tpr_at_fpr_takes_the_best_point_at_or_below_the_target_without_interpolation():
    # 100 non-members score 0..99, members: 3 above every non-member, 1 between the top two non-members
    nonmembers = np.arange(100, dtype=float)
    members = np.array([200.0, 201.0, 202.0, 98.5] + [0.5] * 96)
    member = labels(100, 100)
    metrics = attack_metrics(member, np.r_[members, nonmembers])
    assert metrics["tpr_at_1pct_fpr"] == pytest.approx(0.04)  # at FPR 1 % (one non-member above): 4 members
    assert metrics["tpr_at_0.1pct_fpr"] is None  # 100 non-members cannot measure 0.1 %
    fpr, tpr = roc_points(member, np.r_[members, nonmembers])
    assert tpr_at_fpr(fpr, tpr, 0.001, n_nonmembers=1000) == pytest.approx(0.03)


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
