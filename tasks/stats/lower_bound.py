"""A heuristic lower bound on ε from one attack's member / non-member decisions (not a DP audit: the
one-run canary bound of :mod:`privauditor.tasks.stats.one_run` is).

Heuristic because its two premises do not hold in one run: a split has a fixed size, so a record left out
means another one in (substitution, under which add/remove (ε, δ)-DP gives only about (2ε, (1 + e^ε)δ)),
and one run's records are not independent trials. It never flags a DP violation; it reads as a
measure of separation on the ε scale.

The method is Jagielski, Ullman and Oprea 2020 ("Auditing differentially private machine learning"):
an (ε, δ)-DP training run bounds every test that tells members from non-members, FPR + e^ε · FNR ≥ 1 − δ
and FNR + e^ε · FPR ≥ 1 − δ. A threshold on the attack's score is such a test; with one-sided
Clopper–Pearson upper bounds on its FPR and FNR, every threshold t gives

    ε ≥ max(ln((1 − δ − FNR⁺ₜ) / FPR⁺ₜ), ln((1 − δ − FPR⁺ₜ) / FNR⁺ₜ))

with confidence 1 − α. The best threshold is chosen on the same scores, so α = 0.05 is split (Bonferroni)
over every Clopper–Pearson statement that could be used: the FPR's and the FNR's at each of (scored
records + 1) thresholds.
``eps_lower`` is the largest bound (null when no threshold bounds ε above 0); ``eps_ceiling`` is the
largest bound this sample size could give at all (perfect separation, FPR = FNR = 0 observed): a bound
can never exceed it, so an ``eps_lower`` near ``eps_ceiling`` says "at least this much, and the sample
cannot tell more", and a DP claim below the ceiling is one the audit can contradict.

Example::

    epsilon_bound(np.r_[True, True, False], np.r_[2.0, 1.5, 0.1], delta=1e-3)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

METHOD = (
    "heuristic: Jagielski et al. 2020 on one fixed-size split, Clopper-Pearson, Bonferroni over thresholds"
)
ALPHA = 0.05


def cp_upper(failures: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bounds (level 1 − alpha) on rates of ``failures`` out of ``n``."""
    from scipy.special import betaincinv

    k = np.asarray(failures, dtype=np.float64)
    upper = np.ones_like(k)
    below = k < n
    upper[below] = betaincinv(k[below] + 1, n - k[below], 1 - alpha)
    return upper


def _bounds(fpr_hi: np.ndarray, fnr_hi: np.ndarray, delta: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.log((1 - delta - fnr_hi) / fpr_hi)
        other = np.log((1 - delta - fpr_hi) / fnr_hi)
    return np.nan_to_num(np.maximum(one, other), nan=-np.inf)


def epsilon_bound(member: Any, scores: Any, delta: float, alpha: float = ALPHA) -> dict[str, Any]:
    """``eps_lower`` (null: nothing bounded), ``eps_ceiling``, and the ``eps_delta`` they hold at."""
    member = np.asarray(member, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_in, n_out = int(member.sum()), int((~member).sum())
    level = alpha / (2 * (len(scores) + 1))
    thresholds = np.r_[np.unique(scores), np.inf]  # flag a record as a member when its score >= t
    fp = (scores[~member][None, :] >= thresholds[:, None]).sum(1)
    fn = (scores[member][None, :] < thresholds[:, None]).sum(1)
    found = _bounds(cp_upper(fp, n_out, level), cp_upper(fn, n_in, level), delta).max()
    ceiling = _bounds(cp_upper(np.zeros(1), n_out, level), cp_upper(np.zeros(1), n_in, level), delta)[0]
    return {
        "eps_lower": float(found) if found > 0 else None,
        "eps_ceiling": float(ceiling) if math.isfinite(ceiling) and ceiling > 0 else None,
        "eps_delta": delta,
    }
