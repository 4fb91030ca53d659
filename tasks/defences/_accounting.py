"""DP-SGD's accounting: the σ that spends a target ε and the ε a run has spent (opacus's RDP accountant),
and a second accountant without opacus that checks the first (``tests/test_dp.py``)."""

from __future__ import annotations

import math
import warnings
from typing import Any

#: Rényi orders for both accountants' optimisation (opacus's default stops at 63, too low for ε = 1)
ORDERS = tuple(1 + x / 10.0 for x in range(1, 100)) + tuple(float(a) for a in range(11, 257))


def _rdp_accountant(sigma: float, q: float, steps: int) -> Any:
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(sigma, q, steps)]
    return accountant


def spent_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    """ε spent after ``steps`` Poisson-sampled Gaussian steps (opacus's RDP accountant)."""
    if steps == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    with warnings.catch_warnings():  # "optimal order is the largest alpha": a valid, looser bound
        warnings.simplefilter("ignore", UserWarning)
        return float(_rdp_accountant(sigma, q, steps).get_epsilon(delta, alphas=list(ORDERS)))


def noise_multiplier(epsilon: float, delta: float, q: float, steps: int) -> float:
    """The σ whose ``steps`` steps at sampling rate ``q`` spend ``epsilon`` at ``delta`` (opacus)."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=q,
                                          steps=steps, accountant="rdp", epsilon_tolerance=0.005,
                                          alphas=list(ORDERS)))  # fmt: skip


def rdp_epsilon(sigma: float, q: float, steps: int, delta: float, orders: range = range(2, 257)) -> float:
    """A second accountant, without opacus: the sampled Gaussian's Rényi DP at integer orders α,
    log Σₖ C(α, k) (1 − q)^(α − k) qᵏ exp((k² − k) / (2σ²)) / (α − 1) per step (Mironov, Talwar and Zhang
    2019, §3.3), composed over ``steps`` and converted to (ε, δ) by Balle et al. 2020's Theorem 21."""
    if steps == 0:
        return 0.0
    best = math.inf
    for alpha in orders:
        if q >= 1:  # every record in every step: the Gaussian mechanism's own α / (2σ²)
            best = min(best, _to_epsilon(steps * alpha / (2 * sigma**2), alpha, delta))
            continue
        terms = [
            math.lgamma(alpha + 1) - math.lgamma(k + 1) - math.lgamma(alpha - k + 1)
            + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
            for k in range(alpha + 1)
        ]  # fmt: skip
        top = max(terms)
        rdp = steps * (top + math.log(sum(math.exp(t - top) for t in terms))) / (alpha - 1)
        best = min(best, _to_epsilon(rdp, alpha, delta))
    return max(0.0, best)


def _to_epsilon(rdp: float, alpha: int, delta: float) -> float:
    """(α, rdp)-RDP as (ε, δ)-DP (Balle et al. 2020, Theorem 21)."""
    return rdp + math.log1p(-1 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)
