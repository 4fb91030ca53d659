"""Matched utility: a common validation-NLL level inside every trajectory and clearly below the base's,
read by interpolation between the checkpoints around each first crossing, or "no common level"."""

from __future__ import annotations

import pytest

from privauditor.orchestrator.report.matched import MARGIN, at_level, common_level, crossing, matched


def point(epoch, nll, auc, low=None, high=None):
    return {"epoch": epoch, "step": int(epoch * 10), "utility_loss": nll, "auc": auc,
            "auc_ci_low": auc - 0.05 if low is None else low, "auc_ci_high": auc + 0.05 if high is None else high,
            "cell_id": "absent", "attack": "loss"}  # fmt: skip


BASE = 6.4
FAST = [point(0, 6.4, 0.50), point(1, 5.0, 0.60), point(2, 3.0, 0.70), point(4, 3.5, 0.75)]  # overfits late
SLOW = [point(0, 6.5, 0.50), point(1, 6.0, 0.52), point(2, 5.0, 0.55), point(4, 4.0, 0.58)]


def test_a_trajectory_crossing_the_level_is_read_by_interpolation_with_an_interval():
    level, reason = common_level({"fast": FAST, "slow": SLOW, "none": [point(0, BASE, 0.5)]}, BASE)
    assert (level, reason) == (4.0, "")  # the best utility both reach; `none` is the base, not compared
    assert crossing(FAST, level) == (2, pytest.approx(0.5))  # halfway from NLL 5 to 3
    fast = at_level(FAST, level)
    assert fast["auc"] == pytest.approx(0.65) and fast["between"] == (1, 2)
    # no per-sample scores at hand: the bootstrap bounds are interpolated, and marked so
    assert (fast["ci_low"], fast["ci_high"], fast["delong"]) == (
        pytest.approx(0.60),
        pytest.approx(0.70),
        False,
    )
    assert at_level(SLOW, level)["auc"] == pytest.approx(0.58)  # reaches the level at its last checkpoint
    # a trajectory that falls, rises and falls again is read at its first crossing
    twice = [point(0, 6.4, 0.5), point(1, 3.0, 0.6), point(2, 5.0, 0.7), point(3, 3.0, 0.8)]
    assert at_level(twice, 4.0)["auc"] == pytest.approx(0.5 + 0.1 * 2.4 / 3.4)


def test_a_trajectory_that_never_comes_clearly_below_the_base_means_no_common_level():
    flat = [point(0, 6.4, 0.5), point(1, 6.3, 0.51), point(4, BASE - MARGIN + 0.01, 0.52)]
    level, reason = common_level({"fast": FAST, "flat": flat}, BASE)
    assert level is None and "`flat` gets no lower than 6.16" in reason and f"within {MARGIN}" in reason
    with pytest.raises(ValueError, match="never comes down"):
        crossing(flat, 4.0)


def test_a_trajectory_below_the_level_from_its_first_checkpoint_means_no_common_level():
    early = [point(0, 3.9, 0.7), point(1, 3.0, 0.8)]
    level, reason = common_level({"early": early, "slow": SLOW}, BASE)
    assert level is None and "`early` start(s) at or below the level 4.00" in reason
    assert common_level({"slow": SLOW}, None) == (None, "no `none` cell gives the base's NLL")


def test_matched_gives_each_split_its_level_or_its_reason():
    flat = [point(0, 6.4, 0.5), point(4, 6.3, 0.52)]
    found = {("m", "d"): {"none": {0: [point(0, BASE, 0.5)], 1: [point(0, BASE, 0.5)]},
                          "fast": {0: FAST, 1: FAST}, "slow": {0: SLOW, 1: flat}}}  # fmt: skip
    reading = matched(found)
    assert reading["levels"] == {(("m", "d"), 0): 4.0}
    assert "`slow` gets no lower" in reading["none"][(("m", "d"), 1)]
    assert set(reading["values"][("m", "d")]) == {"fast", "slow"}
    assert reading["values"][("m", "d")]["fast"][0]["auc"] == pytest.approx(0.65)
