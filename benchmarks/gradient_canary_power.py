"""What gradient canaries can show: their one-run bound simulated for a DP run's q, steps and σ.

Each canary's per-step reading is what ``tasks/defences/_gradient_canaries.py`` sees once the data's part is
taken out: 1 where the run's Poisson draw took an included canary, plus Gaussian noise of σ · scale (scale
1: honest; 0.25: the planted bug), scored by the claimed mechanism's log-likelihood ratio. σ is calibrated
as the ``dp`` defence does (opacus's RDP accountant), and the bound is the one cells report
(``one_run_bound`` at α / ``--kinds``: a cell audits its canary kinds at α split over them; the
``defences`` sweep has four). Prints ε̂ for each setting and run.

    python benchmarks/gradient_canary_power.py --kinds 4             # the defences sweep's q, steps, kinds
    python benchmarks/gradient_canary_power.py --records 62 --steps 320 --epsilon 1 --canaries 5000
"""

from __future__ import annotations

import argparse

import numpy as np

from privauditor.tasks.defences import default_delta
from privauditor.tasks.defences.dp import noise_multiplier
from privauditor.tasks.stats.one_run import ALPHA, one_run_bound


def simulate(  # noqa: PLR0913  # the run's settings, each named
    q: float, steps: int, sigma: float, scale: float, m: int, delta: float, rng, kinds: int = 1
) -> float:
    included = rng.random(m) < 0.5
    score = np.zeros(m)
    for _ in range(steps):  # a step at a time: m × steps readings need not fit in memory at once
        x = ((rng.random(m) < q) & included) + sigma * scale * rng.normal(size=m)
        score += (x - 0.5) / sigma**2 if q >= 1 else np.log1p(q * np.expm1((x - 0.5) / sigma**2))
    return float(one_run_bound(score, included, delta, ALPHA / kinds)["eps_lower"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=416, help="privacy units trained (the sweep's)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=208)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 4.0, 8.0])
    parser.add_argument("--canaries", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", type=int, default=1, help="canary kinds audited beside (Bonferroni)")
    args = parser.parse_args()
    q, delta = min(1.0, args.batch_size / args.records), default_delta(args.records)
    print(
        f"q = {q:.4f}, {args.steps} steps, delta {delta:.2g}, alpha {ALPHA / args.kinds:.4g}, {args.runs} runs each"
    )
    for epsilon in args.epsilon:
        sigma = noise_multiplier(epsilon, delta, q, args.steps)
        for m in args.canaries:
            rng = np.random.default_rng([args.seed, m, int(epsilon * 100)])
            found = {
                scale: [simulate(q, args.steps, sigma, scale, m, delta, rng, args.kinds) for _ in range(args.runs)]
                for scale in (1.0, 0.25)
            }  # fmt: skip
            print(f"eps {epsilon:g} (sigma {sigma:.3f}), {m} canaries: honest "
                  f"{' '.join(f'{e:.2f}' for e in found[1.0])}; noise at sigma/4 "
                  f"{' '.join(f'{e:.2f}' for e in found[0.25])}")  # fmt: skip


if __name__ == "__main__":
    main()
