"""Paired differences of two score sets on the same records (tasks/stats/paired.py): the interval agrees
with DeLong's on one difference, and covers a known difference as often as it says."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from privauditor.tasks.stats.paired import mean_interval, paired_differences
from privauditor.tasks.stats.significance import delong


def _pair(rng, m, n, shift, noise):
    """Binormal scores of one model (members shifted by ``shift``), and a second model's: the first's
    plus independent noise of sd ``noise`` (a quantised copy of it)."""
    member = np.r_[np.ones(m, bool), np.zeros(n, bool)]
    before = rng.normal(size=m + n) + shift * member
    return member, before, before + rng.normal(scale=noise, size=m + n)


def test_the_paired_interval_of_one_difference_agrees_with_delongs():
    rng = np.random.default_rng(0)
    member, before, after = _pair(rng, 300, 300, 1.0, 0.5)
    draws = paired_differences(member, before, after, 2000, seed=1)
    low, high = mean_interval([draws["auc"]])
    test = delong(member, after, before)
    assert abs(low - test["ci_low"]) < 0.15 * (test["ci_high"] - test["ci_low"])
    assert abs(high - test["ci_high"]) < 0.15 * (test["ci_high"] - test["ci_low"])
    assert "tpr" in draws and len(draws["tpr"]) == 2000
    assert "tpr" not in paired_differences(member[:350], before[:350], after[:350], 10, 0)  # 50 non-members


def test_the_mean_interval_over_cells_covers_the_true_difference_about_95_percent():
    """Four independent cells, each a model and a noisier copy: the true AUCs are binormal, Φ(d / √v),
    so the true mean difference is known; the interval of the mean covers it in 93-98 % of 300 runs."""
    rng = np.random.default_rng(7)
    shift, noise = 1.0, 0.6
    truth = norm.cdf(shift / np.sqrt(2 * (1 + noise**2))) - norm.cdf(shift / np.sqrt(2))
    covered = 0
    for run in range(300):
        draws = []
        for cell in range(4):
            member, before, after = _pair(rng, 120, 120, shift, noise)
            draws.append(paired_differences(member, before, after, 400, run * 10 + cell, None)["auc"])
        low, high = mean_interval(draws)
        covered += low <= truth <= high
    print(f"coverage {covered / 300:.3f} of the true mean difference {truth:.4f}")
    assert 0.92 <= covered / 300 <= 0.98
