"""Matched utility: levels at fixed distances below the base's validation NLL (independent of which
techniques the sweep holds), each trajectory read by interpolation at its first crossing, and every pair
tested for equivalence (TOST) and for a difference over blocks, worded on the page accordingly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privauditor.orchestrator.report.matched import (
    EQUIVALENCE,
    MIN_BLOCKS,
    OFFSETS,
    at_level,
    crossing,
    matched,
    matched_section,
    pairs,
    reading,
)


def point(epoch, nll, auc, low=None, high=None):
    return {"epoch": epoch, "step": int(epoch * 10), "utility_loss": nll, "auc": auc,
            "auc_ci_low": auc - 0.05 if low is None else low, "auc_ci_high": auc + 0.05 if high is None else high,
            "cell_id": "absent", "attack": "loss"}  # fmt: skip


BASE = 6.4
FAST = [point(0, 6.4, 0.50), point(1, 5.0, 0.60), point(2, 3.0, 0.70), point(4, 3.5, 0.75)]  # overfits late
SLOW = [point(0, 6.5, 0.50), point(1, 6.0, 0.52), point(2, 5.0, 0.55), point(4, 4.0, 0.58)]
FLAT = [point(0, 6.4, 0.50), point(1, 6.3, 0.51), point(4, 6.2, 0.52)]  # never 0.25 nats below the base


def test_a_trajectory_crossing_the_level_is_read_by_interpolation_with_an_interval():
    assert crossing(FAST, 4.0) == (2, pytest.approx(0.5))  # halfway from NLL 5 to 3
    fast = at_level(FAST, 4.0)
    assert fast["auc"] == pytest.approx(0.65) and fast["between"] == (1, 2)
    # no per-sample scores at hand: the bootstrap bounds are interpolated, and marked so
    assert (fast["ci_low"], fast["ci_high"], fast["delong"]) == (
        pytest.approx(0.60),
        pytest.approx(0.70),
        False,
    )
    assert at_level(SLOW, 4.0)["auc"] == pytest.approx(0.58)  # reaches the level at its last checkpoint
    # a trajectory that falls, rises and falls again is read at its first crossing
    twice = [point(0, 6.4, 0.5), point(1, 3.0, 0.6), point(2, 5.0, 0.7), point(3, 3.0, 0.8)]
    assert at_level(twice, 4.0)["auc"] == pytest.approx(0.5 + 0.1 * 2.4 / 3.4)


def test_a_trajectory_that_never_reaches_or_starts_below_a_level_is_not_read_there_with_the_reason():
    assert reading(FLAT, 6.15) == (None, "gets no lower than 6.20, above the level 6.15")
    with pytest.raises(ValueError, match="never comes down"):
        crossing(FLAT, 4.0)
    early = [point(0, 3.9, 0.7), point(1, 3.0, 0.8)]
    assert reading(early, 4.0) == (None, "starts at 3.90, at or below the level 4.00")
    assert reading(SLOW, 4.0)[0]["auc"] == pytest.approx(0.58)


def test_the_levels_are_fixed_below_the_base_and_a_weak_technique_moves_no_other_reading():
    """The old rule (the worst technique's best NLL) gave no level at all once `flat` joined."""
    none = [point(0, BASE, 0.5)]
    found = {("m", "d"): {"none": {0: none, 1: none}, "fast": {0: FAST, 1: FAST}, "slow": {0: SLOW, 1: SLOW}}}
    before = matched(found)
    assert before["bases"] == {(("m", "d"), 0): BASE, (("m", "d"), 1): BASE}
    # base − 2 nats = 4.4: `fast` crosses it between NLL 5 and 3, `slow` between 5 and 4
    assert before["values"][2.0][("m", "d")]["fast"][0]["auc"] == pytest.approx(0.6 + 0.1 * 0.6 / 2)
    assert before["values"][2.0][("m", "d")]["slow"][1]["auc"] == pytest.approx(0.55 + 0.03 * 0.6)
    early = [point(0, 5.0, 0.7), point(1, 3.0, 0.8)]  # starts below the first levels
    found[("m", "d")] |= {"flat": {0: FLAT, 1: FLAT}, "early": {0: early, 1: early}}
    after = matched(found)
    assert after["bases"] == before["bases"]
    for offset in OFFSETS:
        kept = {
            b: {n: v for n, v in ts.items() if n in ("fast", "slow")}
            for b, ts in after["values"][offset].items()
        }
        assert kept == before["values"][offset]
    assert "flat" not in after["values"][0.25].get(("m", "d"), {})
    assert after["missed"][0.25][(("m", "d"), 0, "flat")] == "gets no lower than 6.20, above the level 6.15"
    assert after["missed"][0.25][(("m", "d"), 1, "early")] == "starts at 5.00, at or below the level 6.15"
    assert after["values"][2.0][("m", "d")]["early"][0]["auc"] == pytest.approx(0.7 + 0.1 * 0.6 / 2)
    text = "\n".join(matched_section(found))
    assert "| base − 0.25 | m | d | 0 | flat | gets no lower than 6.20, above the level 6.15 |" in text


def test_a_split_without_a_base_has_no_level_and_says_why():
    reading_ = matched({("m", "d"): {"fast": {0: FAST}}})
    assert reading_["none"] == {(("m", "d"), 0): "no `none` cell gives the base's NLL"}
    assert not any(reading_["values"].values())
    assert "**no common utility level**" in "\n".join(matched_section({("m", "d"): {"fast": {0: FAST}}}))


def flat_auc(auc):
    """A trajectory from the base's NLL to 3 nats below it at one AUC: its reading at every level."""
    return [point(0, BASE, auc), point(1, BASE - 3, auc)]


A = np.array([0.60, 0.62, 0.64, 0.66])
CLOSE = A + [0.001, -0.002, 0.0015, 0.0005]  # within a few thousandths of A in every block
LOWER = A - [0.10, 0.11, 0.09, 0.10]  # clearly below A in every block
NOISY = A + [0.05, -0.05, 0.03, -0.04]  # neither shown close nor shown different


def four_blocks(extra=None):
    found = {}
    for i in range(4):
        techniques = {"none": {0: [point(0, BASE, 0.5)]}, "a": {0: flat_auc(A[i])}, "close": {0: flat_auc(CLOSE[i])},
                      "lower": {0: flat_auc(LOWER[i])}, "noisy": {0: flat_auc(NOISY[i])}}  # fmt: skip
        if extra is not None and i < MIN_BLOCKS - 1:
            techniques[extra] = {0: flat_auc(0.7)}
        found[(f"m{i}", "d")] = techniques
    return found


def test_the_tost_p_value_is_the_larger_of_two_one_sided_t_tests_over_blocks():
    values = matched(four_blocks())["values"][0.5]
    one = {b: {n: ts[n] for n in ("a", "noisy")} for b, ts in values.items()}
    (row,) = pairs(one)
    # by hand: the per-block differences, their standard error, and the two one-sided t tests (df n - 1)
    d = A - NOISY
    se = d.std(ddof=1) / np.sqrt(len(d))
    lower = stats.t.sf((d.mean() + EQUIVALENCE) / se, len(d) - 1)  # H0: mean <= -margin
    upper = stats.t.cdf((d.mean() - EQUIVALENCE) / se, len(d) - 1)  # H0: mean >= +margin
    assert row["blocks"] == 4 and row["difference"] == pytest.approx(d.mean())
    assert row["tost_p"] == pytest.approx(max(lower, upper)) and row["tost_holm"] == pytest.approx(
        row["tost_p"]
    )
    assert row["t_p"] == pytest.approx(2 * stats.t.sf(abs(d.mean() / se), len(d) - 1))
    assert row["verdict"] == "not shown different, not shown equivalent"


def test_pairs_are_called_equivalent_only_where_tost_rejects_and_too_few_blocks_are_not_tested():
    found = four_blocks(extra="rare")  # `rare` is read in 2 blocks only
    rows = {(r["a"], r["b"]): r for r in pairs(matched(found)["values"][0.25])}
    assert len(rows) == 10 and rows[("a", "rare")]["blocks"] == MIN_BLOCKS - 1
    assert rows[("a", "close")]["equivalent"] and not rows[("a", "close")]["different"]
    assert rows[("a", "close")]["verdict"].startswith(f"equivalent within ±{EQUIVALENCE} AUC (TOST p ")
    assert rows[("a", "lower")]["different"] and not rows[("a", "lower")]["equivalent"]
    assert rows[("a", "lower")]["verdict"].startswith("different (paired t p ")
    assert rows[("a", "noisy")]["verdict"] == "not shown different, not shown equivalent"
    assert (
        rows[("a", "rare")]["verdict"] == "too few blocks to test equivalence"
        and rows[("a", "rare")]["tost_p"] is None
    )
    # Holm over the level's tested pairs: never smaller than the raw p
    assert all(r["tost_holm"] >= r["tost_p"] for r in rows.values() if r["tost_p"] is not None)

    text = "\n".join(matched_section(found))
    assert f"±{EQUIVALENCE} AUC" in text and "ttost_paired" in text and "Holm" in text
    assert (
        f"| base − 0.25 | a − close | 4 | {(A - CLOSE).mean():+.3f} | equivalent within ±0.02 AUC (TOST p "
        in text
    )
    assert "| base − 0.25 | a − noisy | 4 |" in text and "not shown different, not shown equivalent" in text
    assert "| base − 0.25 | a − rare | 2 |" in text and "too few blocks to test equivalence" in text
    assert "not told apart" not in text and "Every reading at the level" in text
    assert "| rare | 0.700 (2) |" in text  # read in 2 blocks at the first level
