"""The one-run lower bound on ε (tasks/stats/one_run.py): documented values, an independent implementation's
values, no false violations on null scores or on a mechanism that is exactly ε-DP under add/remove, and
power where the mechanism leaks more than it claims."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privauditor.tasks.stats.one_run import epsilon_lower, one_run_bound, p_value


@pytest.mark.parametrize("r, expected", [(10, 1.05), (32, 2.32)])
def test_every_guess_right_bounds_eps_by_logit_of_alpha_to_the_one_over_r(r, expected):
    """With r right guesses and δ = 0, ε̂ = logit(0.05^(1/r)) (the ceilings the issue and the paper quote)."""
    found = epsilon_lower(r, r, r, 0.0)
    assert found == pytest.approx(math.log(0.05 ** (1 / r) / (1 - 0.05 ** (1 / r))), abs=1e-7)
    assert round(found, 2) == expected


@pytest.mark.parametrize(
    "m, r, v, delta, expected",
    [(1000, 100, 93, 1e-5, 1.917744), (1000, 100, 93, 0.0, 1.923624), (1000, 50, 47, 1e-5, 1.740970)],
)
def test_the_bound_equals_jax_privacys_on_the_same_counts(m, r, v, delta, expected):
    """jax_privacy 2.0.0's ``_epsilon_one_run(0, m, r, v, 0.05, delta)`` (jax_privacy/auditing.py lines
    139-179 at commit 8967688) on the counts of ``benchmarks/one_run_crosscheck.py``'s score vector."""
    assert epsilon_lower(m, r, v, delta) == pytest.approx(expected, abs=2e-6)


def test_the_p_value_rises_with_eps_and_delta_only_adds():
    eps = np.linspace(0, 4, 9)
    values = [p_value(500, 60, 50, e, 1e-5) for e in eps]
    assert values == sorted(values) and values[0] < 0.05 < values[-1]
    assert all(p_value(500, 60, 50, e, 1e-5) >= p_value(500, 60, 50, e, 0.0) for e in eps)
    with pytest.raises(ValueError, match="need 0 <= v <= r <= m"):
        p_value(10, 5, 6, 1.0, 0.0)


def _runs(seed: int, runs: int, m: int, scores_of) -> list[dict]:
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(runs):
        included = rng.random(m) < 0.5
        found.append(one_run_bound(scores_of(rng, included), included, delta=1e-5))
    return found


def test_null_scores_give_no_bound_in_a_seeded_simulation(capsys):
    """Scores that do not depend on the coins (canaries never trained on): ε̂ > 0 in at most α of runs."""
    found = _runs(0, 400, 200, lambda rng, included: rng.normal(size=len(included)))
    rate = np.mean([f["eps_lower"] > 0 for f in found])
    with capsys.disabled():
        print(f"\nnull scores: eps_lower > 0 in {rate:.1%} of 400 runs (alpha 5 %)")
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 400)


@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_a_mechanism_exactly_eps_dp_under_add_remove_is_not_flagged(eps, capsys):
    """Randomized response on each canary's presence (1 with probability e^ε / (1 + e^ε) if included, else
    1 / (1 + e^ε); ties broken by position) is exactly ε-DP for adding or removing one canary: with
    independent coins ε̂ > ε in at most α of runs."""
    keep = math.exp(eps) / (1 + math.exp(eps))

    def respond(rng, included):
        return np.where(rng.random(len(included)) < keep, included, ~included).astype(float)

    found = _runs(1, 200, 1000, respond)
    rate = np.mean([f["eps_lower"] > eps for f in found])
    largest = max(f["eps_lower"] for f in found)
    with capsys.disabled():
        print(
            f"\nrandomized response at eps {eps}: eps_lower > eps in {rate:.1%} of 200 runs, largest {largest:.3f}"
        )
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 200) and largest < eps + 0.5


def test_a_mechanism_leaking_more_than_it_claims_is_flagged():
    """Randomized response at ε = 4 audited against a claim of ε = 1: flagged in almost every run, and
    never above what 1,000 canaries can show."""
    keep = math.exp(4) / (1 + math.exp(4))
    found = _runs(2, 40, 1000, lambda rng, inc: np.where(rng.random(len(inc)) < keep, inc, ~inc) + 0.0)
    assert np.mean([f["eps_lower"] > 1 for f in found]) >= 0.95
    assert all(f["eps_lower"] <= f["eps_ceiling"] for f in found)
    assert found[0]["m"] == 1000 and found[0]["adjacency"].startswith("add/remove")
