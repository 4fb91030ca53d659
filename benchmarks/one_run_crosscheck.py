"""The one-run lower bound on ε (privauditor.tasks.stats.one_run) against jax_privacy's implementation on
the same score vector: 1,000 canaries, each included by a fair coin, included ones scored N(1, 1) and the
others N(0, 1) (numpy seed 0); guesses "in" for the top k and "out" for the bottom k.

jax_privacy (google-deepmind/jax_privacy, ``jax_privacy/auditing.py``: ``_one_run_p_value`` lines 110-136,
``_epsilon_one_run`` lines 139-179 at commit 8967688) needs jax, so it is not a test dependency::

    python -m venv /tmp/jaxp && /tmp/jaxp/bin/pip install jax-privacy numpy scipy
    /tmp/jaxp/bin/pip install --no-deps .          # this checkout, for the same score vector
    /tmp/jaxp/bin/python benchmarks/one_run_crosscheck.py

Without jax_privacy it prints privauditor's values alone.
"""

from __future__ import annotations

import numpy as np

from privauditor.tasks.stats.one_run import epsilon_lower, guesses


def main() -> None:
    rng = np.random.default_rng(0)
    included = rng.random(1000) < 0.5
    scores = rng.normal(0, 1, 1000) + included
    try:
        from jax_privacy.auditing import _epsilon_one_run as theirs
    except ImportError:
        theirs = None
        print("jax_privacy is not installed: privauditor's values alone")
    print(f"{'k+':>4} {'k-':>4} {'delta':>8} {'r':>4} {'v':>4} {'privauditor':>12} {'jax_privacy':>12}")
    for k_plus, k_minus, delta in (
        (50, 50, 1e-5),
        (50, 50, 0.0),
        (50, 0, 1e-5),
        (10, 10, 1e-5),
        (200, 200, 1e-6),
    ):
        r, v = guesses(scores, included, k_plus, k_minus)
        ours = epsilon_lower(len(scores), r, v, delta)
        other = "-" if theirs is None else f"{float(theirs(0.0, len(scores), r, v, 0.05, delta)):.6f}"
        print(f"{k_plus:>4} {k_minus:>4} {delta:>8.0e} {r:>4} {v:>4} {ours:>12.6f} {other:>12}")


if __name__ == "__main__":
    main()
