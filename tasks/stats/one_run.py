"""The one-run lower bound on ε: Steinke, Nasr and Jagielski 2023, "Privacy Auditing with One (1) Training
Run" (https://arxiv.org/abs/2305.08846), their Theorem 5.2 and Appendix D's algorithm.

m canaries are each put into the training data by an independent fair coin. After training, the auditor
guesses "in" for the k₊ canaries with the highest scores and "out" for the k₋ with the lowest, abstaining
on the rest: r = k₊ + k₋ guesses, v of them right. If training is (ε, δ)-DP with respect to adding or
removing one canary (add/remove adjacency, what opacus's accountant certifies), then for W ~ Binomial(r, q),
q = e^ε / (1 + e^ε),

    P[v or more right] ≤ p(ε) = P[W ≥ v] + 2 m δ · max over 1 ≤ i ≤ v of P[v − i ≤ W < v] / i

(p(ε) = P[W ≥ v] at δ = 0: pure DP makes each guess right with probability at most q, independently).
ε̂ is the largest ε that this rejects at level α, the root of p(ε) = α (0 when even ε = 0 is not
rejected). If the run is (ε, δ)-DP, then ε̂ ≤ ε with probability at least 1 − α over the coins and the
training: a run claiming (ε, δ) with ε < ε̂ contradicts its claim. The same p-value is
jax_privacy's ``_one_run_p_value`` (google-deepmind/jax_privacy, ``jax_privacy/auditing.py`` lines 110-136
at commit 8967688); ``benchmarks/one_run_crosscheck.py`` compares the two on one score vector.

Guesses are fixed in advance as fractions of m (:data:`FRACTIONS`): for each fraction f, k = round(f · m)
guesses on each side (k₊ = k₋ = k) and on the top alone (k₊ = k, k₋ = 0: jax_privacy's one-sided audit,
which scores that rarely move a member, such as a gradient canary Poisson sampling left out, need); the
bound is the largest over these guess counts, each tested at α / (their number) (Bonferroni), so the
maximum holds at α.
``ceiling`` is the most this m could ever show: every guess right at the largest fraction (with r right
guesses and δ = 0, ε̂ ≤ logit(α^(1/r)): r = 10 gives 1.05, r = 32 gives 2.32 at α = 0.05).

Example::

    one_run_bound(scores, included, delta=1e-5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

METHOD = "Steinke, Nasr & Jagielski 2023 one-run bound, add/remove, Bonferroni over the guess counts"
ALPHA = 0.05
#: k = round(fraction · m) for each fraction, fixed before any run
FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.25)


def guess_counts(m: int, fractions: Sequence[float] = FRACTIONS) -> list[tuple[int, int]]:
    """The (k₊, k₋) tried over m canaries: (k, k) then (k, 0) for each fraction's k."""
    ks = [min(m // 2, max(1, round(f * m))) for f in fractions]
    return [(k, k) for k in ks] + [(k, 0) for k in ks]


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """An upper bound on P[v or more of r guesses right] about m canaries under (ε, δ)-DP."""
    from scipy.stats import binom

    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, not v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-eps))
    tail = float(binom.sf(v - 1, r, q))  # P[W >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    i = np.arange(1, v + 1)
    window = binom.cdf(v - 1, r, q) - binom.cdf(v - i - 1, r, q)  # P[v - i <= W < v]
    return min(tail + 2 * m * delta * float(np.max(window / i)), 1.0)


def epsilon_lower(m: int, r: int, v: int, delta: float, alpha: float = ALPHA) -> float:
    """ε̂: the root of p(ε) = α, 0 where ε = 0 is not rejected (bisection to 1e-9 past a doubling)."""

    def rejected(eps: float) -> bool:
        return p_value(m, r, v, eps, delta) <= alpha

    if r == 0 or not rejected(0.0):
        return 0.0
    low, high = 0.0, 1.0
    while rejected(high):
        low, high = high, 2 * high
        if high > 1e3:  # every guess right with a tiny alpha: unbounded in practice
            return math.inf
    while high - low > 1e-9:
        middle = (low + high) / 2
        low, high = (middle, high) if rejected(middle) else (low, middle)
    return low


def guesses(scores: np.ndarray, included: np.ndarray, k_plus: int, k_minus: int) -> tuple[int, int]:
    """(r, v): "in" for the k₊ highest scores, "out" for the k₋ lowest (ties by position, which the
    coins do not depend on)."""
    order = np.argsort(-scores, kind="stable")
    top, bottom = order[:k_plus], order[len(order) - k_minus :] if k_minus else order[:0]
    return k_plus + k_minus, int(included[top].sum() + (~included[bottom]).sum())


def one_run_bound(
    scores: Sequence[float], included: Sequence[bool], delta: float, alpha: float = ALPHA,
    fractions: Sequence[float] = FRACTIONS,
) -> dict[str, Any]:  # fmt: skip
    """ε̂ over the canaries' ``scores`` (higher: more likely trained on) and their coins, with the guess
    count that gave it, the ceiling, m and what the bound refers to."""
    values, coins = np.asarray(scores, dtype=np.float64), np.asarray(included, dtype=bool)
    m = len(values)
    if m != len(coins) or not np.isfinite(values).all():
        raise ValueError("one score (finite) per canary is needed")
    counts = guess_counts(m, fractions)
    level = alpha / len(counts)
    rows: list[dict[str, Any]] = []
    for k_plus, k_minus in counts:
        r, v = guesses(values, coins, k_plus, k_minus)
        rows.append({"k_plus": k_plus, "k_minus": k_minus, "guesses": r, "correct": v,
                     "eps": epsilon_lower(m, r, v, delta, level)})  # fmt: skip
    best = max(rows, key=lambda row: float(row["eps"]))
    widest = max(int(row["guesses"]) for row in rows)
    return {
        "eps_lower": best["eps"], "eps_ceiling": epsilon_lower(m, widest, widest, delta, level),
        "m": m, "included": int(coins.sum()), "k_plus": best["k_plus"], "k_minus": best["k_minus"],
        "guesses": best["guesses"],
        "correct": best["correct"], "delta": delta, "alpha": alpha, "by_guesses": rows,
        "adjacency": "add/remove one canary (independent inclusion)", "method": METHOD,
    }  # fmt: skip
