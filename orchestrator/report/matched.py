"""AUC at matched utility: every technique read where its validation NLL first comes down to one level.

Per (model, dataset, seed), over the compared techniques (every trained one; ``none`` is the base):

- the **level** L is the highest of the techniques' lowest validation NLLs: the best utility every one
  of them reaches;
- it must be **clearly below the base's NLL** (``none``'s, by :data:`MARGIN` nats at least) and **inside
  every trajectory**: each starts above it (checkpoints start at epoch 0, the technique's initial state),
  so each crosses it. Otherwise the split has **no common utility level** and the page says why (a
  technique that never learns the records, or one already below the level at its first checkpoint);
- a technique's AUC at L is **interpolated** linearly in NLL between the two checkpoints around its first
  crossing (later crossings of a rising-and-falling NLL are ignored: the first is what training longer
  meets first), with a 95 % interval: DeLong's variance of that weighted sum of the two checkpoints'
  AUCs, which are measured on the same samples (the covariance counts), normal; where the per-sample
  scores are not at hand, the two checkpoints' bootstrap bounds interpolated (marked ``~``).

Example::

    level, reason = common_level({"full": full_points, "prompt": prompt_points}, base=6.4)
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from .blocks import CONTROL, Block, aligned

#: how far below the base's validation NLL a common level must be, in nats per token: a perplexity 22 %
#: below the base's, far above the checkpoint-to-checkpoint noise of an NLL over 64 validation records
#: (about 0.01-0.03 nats on the tiny bases), so a level is never the base's own utility. Fixed before
#: any run read it.
MARGIN = 0.25


def common_level(techniques: dict[str, list[dict[str, Any]]], base: float | None) -> tuple[float | None, str]:
    """(the level, "") for one split's trajectories (technique → rows by step), or (None, why not)."""
    compared = {name: points for name, points in techniques.items() if name != CONTROL}
    if not compared:
        return None, "no trained technique"
    if base is None:
        return None, "no `none` cell gives the base's NLL"
    lows = {name: min(r["utility_loss"] for r in points) for name, points in compared.items()}
    slowest = max(sorted(lows), key=lambda n: lows[n])
    level = lows[slowest]
    if level > base - MARGIN:
        return None, (
            f"`{slowest}` gets no lower than {level:.2f} nats, within {MARGIN} of the base's {base:.2f}"
        )
    early = sorted(name for name, points in compared.items() if points[0]["utility_loss"] <= level)
    if early:
        return None, f"{', '.join(f'`{n}`' for n in early)} start(s) at or below the level {level:.2f}"
    return level, ""


def crossing(points: list[dict[str, Any]], level: float) -> tuple[int, float]:
    """(index j, weight w): the trajectory first reaches ``level`` between checkpoints j - 1 and j, where
    the NLL is ``(1 - w)·NLL[j-1] + w·NLL[j]``; the first checkpoint must be above the level."""
    if points[0]["utility_loss"] <= level:
        raise ValueError(f"the trajectory starts at {points[0]['utility_loss']:.3f}, not above {level:.3f}")
    for j in range(1, len(points)):
        after = points[j]["utility_loss"]
        if after <= level:
            before = points[j - 1]["utility_loss"]
            return j, (before - level) / (before - after)
    raise ValueError(f"the trajectory never comes down to {level:.3f}")


def at_level(points: list[dict[str, Any]], level: float, out: Path | None = None) -> dict[str, Any]:
    """The AUC where ``points`` first reaches ``level``, its 95 % interval, and the checkpoints around it."""
    j, w = crossing(points, level)
    before, after = points[j - 1], points[j]
    auc = (1 - w) * before["auc"] + w * after["auc"]
    found = None if out is None else aligned(out, [before, after])
    if found is not None:
        from privauditor.tasks.significance import delong_covariance

        _, covariance = delong_covariance(*found)
        weights = np.array([1 - w, w])
        half = NormalDist().inv_cdf(0.975) * math.sqrt(max(0.0, float(weights @ covariance @ weights)))
        low, high, exact = auc - half, auc + half, True
    else:
        low = (1 - w) * before["auc_ci_low"] + w * after["auc_ci_low"]
        high = (1 - w) * before["auc_ci_high"] + w * after["auc_ci_high"]
        exact = False
    return {
        "auc": auc,
        "ci_low": low,
        "ci_high": high,
        "delong": exact,
        "between": (before["epoch"], after["epoch"]),
    }


def matched(found: dict[Block, dict[str, dict[int, list[dict]]]], out: Path | None = None) -> dict[str, Any]:
    """Per block and seed, the level (or why there is none) and each technique's reading there.

    Returns ``{"values": block → technique → seed → at_level(...), "levels": (block, seed) → level,
    "none": (block, seed) → reason}``; a block none of whose seeds has a level is absent from ``values``.
    """
    values: dict[Block, dict[str, dict[int, dict]]] = {}
    levels: dict[tuple[Block, int], float] = {}
    missing: dict[tuple[Block, int], str] = {}
    for block, techniques in found.items():
        seeds = sorted({s for by_seed in techniques.values() for s in by_seed})
        for seed in seeds:
            split = {name: by_seed[seed] for name, by_seed in techniques.items() if seed in by_seed}
            base = split.get(CONTROL, [{}])[0].get("utility_loss")
            level, reason = common_level(split, base)
            if level is None:
                missing[(block, seed)] = reason
                continue
            levels[(block, seed)] = level
            for name, points in split.items():
                if name != CONTROL:
                    values.setdefault(block, {}).setdefault(name, {})[seed] = at_level(points, level, out)
    return {"values": values, "levels": levels, "none": missing}
