"""AUC at matched utility: every technique read where its validation NLL first comes down to fixed levels.

**The levels** (one rule, fixed before any run read it): per (model, dataset, seed), each level is a
fixed distance below the **base's own validation NLL** (``none``'s cell of that split):
``base − d`` for ``d`` in :data:`OFFSETS` (0.25, 0.5, 1 and 2 nats: a perplexity 22 %, 39 %, 63 % and
86 % below the base's). A level depends on the base and the split alone, never on which techniques the
sweep holds: adding or removing a technique moves no level and no other technique's reading (the
previous rule, the worst technique's best NLL, moved every level with the weakest technique).

**A technique's reading** at a level: its AUC interpolated linearly in NLL between the two checkpoints
around its **first** crossing (later crossings of a rising-and-falling NLL are ignored: the first is
what training longer meets first), with a 95 % interval: DeLong's variance of that weighted sum of the
two checkpoints' AUCs, which are measured on the same samples (the covariance counts), normal; where the
per-sample scores are not at hand, the two checkpoints' bootstrap bounds interpolated (marked ``~``). A
trajectory that never comes down to the level, or starts at or below it (checkpoints start at epoch 0,
the technique's initial state), is **not read** there, with the reason; the others still are.

**Pairs** (:func:`pairs`): at each level, for each pair of techniques, the blocks where both are read;
per block the mean over the seeds both are read in of their AUCs. Two tests over those blocks, each
Holm-corrected over the level's tested pairs: equivalence by two one-sided paired t tests (TOST,
Schuirmann 1987; ``statsmodels.stats.weightstats.ttost_paired``) with the margin :data:`EQUIVALENCE`,
and a paired t test of no difference (``scipy.stats.ttest_rel``). A pair is called **equivalent** only
where TOST rejects; with fewer than :data:`MIN_BLOCKS` common blocks neither test runs.

Example::

    reading = matched(found)            # found: block → technique → seed → trajectory
    rows = pairs(reading["values"][0.5])  # every pair at base − 0.5 nats
"""

from __future__ import annotations

import math
from itertools import combinations
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from .battery import ALPHA, run
from .blocks import CONTROL, Block, Trajectories, aligned, measured
from .formats import markdown_table
from .formats import number as _fmt
from .row_schema import Row

#: the levels' distances below the base's validation NLL, nats per token: a doubling ladder from 0.25
#: (far above the checkpoint-to-checkpoint noise of an NLL over 64 validation records, about 0.01-0.03
#: nats on the tiny bases, so no level is the base's own utility) to 2 (perplexity down 86 %, what only
#: a technique that learns the domain well reaches). Fixed before any run read it.
OFFSETS = (0.25, 0.5, 1.0, 2.0)
#: the smallest distance: a level is at least this far below the base's NLL
MARGIN = OFFSETS[0]
#: the equivalence margin of the pairwise TOST, in AUC: two techniques whose mean AUC difference over
#: blocks is shown inside ±0.02 are called equivalent (a tenth of the 0.5-0.7 span the techniques cover
#: at equal epochs). Fixed before any run read it.
EQUIVALENCE = 0.02
#: fewest common blocks a pair is tested over: with 2, a t test has one degree of freedom and no power
MIN_BLOCKS = 3


def level_of(base: float, offset: float) -> float:
    """The level ``offset`` nats below the base's NLL (:data:`OFFSETS`)."""
    return base - offset


def crossing(points: list[Row], level: float) -> tuple[int, float]:
    """(index j, weight w): the trajectory first reaches ``level`` between checkpoints j - 1 and j, where
    the NLL is ``(1 - w)·NLL[j-1] + w·NLL[j]``; the first checkpoint must be above the level."""
    first = measured(points[0], "utility_loss")
    if first <= level:
        raise ValueError(f"the trajectory starts at {first:.3f}, not above {level:.3f}")
    for j in range(1, len(points)):
        after = measured(points[j], "utility_loss")
        if after <= level:
            before = measured(points[j - 1], "utility_loss")
            return j, (before - level) / (before - after)
    raise ValueError(f"the trajectory never comes down to {level:.3f}")


def at_level(points: list[Row], level: float, out: Path | None = None) -> dict[str, Any]:
    """The AUC where ``points`` first reaches ``level``, its 95 % interval, and the checkpoints around it."""
    j, w = crossing(points, level)
    before, after = points[j - 1], points[j]
    auc = (1 - w) * measured(before, "auc") + w * measured(after, "auc")
    found = None if out is None else aligned(out, [before, after])
    if found is not None:
        from privauditor.tasks.stats.significance import delong_covariance

        _, covariance = delong_covariance(*found)
        weights = np.array([1 - w, w])
        half = NormalDist().inv_cdf(0.975) * math.sqrt(max(0.0, float(weights @ covariance @ weights)))
        low, high, exact = auc - half, auc + half, True
    else:
        low = (1 - w) * measured(before, "auc_ci_low") + w * measured(after, "auc_ci_low")
        high = (1 - w) * measured(before, "auc_ci_high") + w * measured(after, "auc_ci_high")
        exact = False
    return {
        "auc": auc,
        "ci_low": low,
        "ci_high": high,
        "delong": exact,
        "between": (before["epoch"], after["epoch"]),
    }


def reading(points: list[Row], level: float, out: Path | None = None) -> tuple[dict | None, str]:
    """(:func:`at_level`'s reading, "") or (None, why the trajectory is not read at ``level``)."""
    first, lowest = measured(points[0], "utility_loss"), min(measured(r, "utility_loss") for r in points)
    if first <= level:
        return None, f"starts at {first:.2f}, at or below the level {level:.2f}"
    if lowest > level:
        return None, f"gets no lower than {lowest:.2f}, above the level {level:.2f}"
    return at_level(points, level, out), ""


def matched(found: Trajectories[Row], out: Path | None = None) -> dict[str, Any]:
    """Every technique's reading at every level of every split (:data:`OFFSETS` below the split's base).

    Returns ``{"values": offset → block → technique → seed → at_level(...), "bases": (block, seed) → the
    base's NLL, "missed": offset → (block, seed, technique) → why not read, "none": (block, seed) → why the
    split has no level}``; a block with no reading at an offset is absent from ``values[offset]``.
    """
    values: dict[float, dict[Block, dict[str, dict[int, dict]]]] = {d: {} for d in OFFSETS}
    missed: dict[float, dict[tuple[Block, int, str], str]] = {d: {} for d in OFFSETS}
    bases: dict[tuple[Block, int], float] = {}
    none: dict[tuple[Block, int], str] = {}
    for block, techniques in found.items():
        seeds = sorted({s for by_seed in techniques.values() for s in by_seed})
        for seed in seeds:
            split = {name: by[seed] for name, by in techniques.items() if seed in by and name != CONTROL}
            base = techniques.get(CONTROL, {}).get(seed, [{}])[0].get("utility_loss")
            if base is None or not split:
                none[(block, seed)] = (
                    "no `none` cell gives the base's NLL" if split else "no trained technique"
                )
                continue
            bases[(block, seed)] = base
            for offset in OFFSETS:
                for name, points in sorted(split.items()):
                    value, why = reading(points, level_of(base, offset), out)
                    if value is None:
                        missed[offset][(block, seed, name)] = why
                    else:
                        values[offset].setdefault(block, {}).setdefault(name, {})[seed] = value
    return {"values": values, "bases": bases, "missed": missed, "none": none}


def pairs(values: dict[Block, dict[str, dict[int, dict]]]) -> list[dict[str, Any]]:
    """Every pair of techniques at one level (``matched(...)["values"][offset]``), with its tests.

    Each row: ``a``, ``b``, ``blocks`` (how many are common), ``difference`` (mean over them of a − b),
    ``tost_p`` and ``t_p`` with their Holm-adjusted ``tost_holm`` and ``t_holm`` (None under
    :data:`MIN_BLOCKS`), ``equivalent``, ``different`` and the ``verdict`` the page prints.
    """
    from scipy.stats import ttest_rel
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.weightstats import ttost_paired

    names = sorted({name for techniques in values.values() for name in techniques})
    rows = []
    for a, b in combinations(names, 2):
        first, second = [], []
        for block in sorted(values):
            by_a, by_b = values[block].get(a, {}), values[block].get(b, {})
            seeds = sorted(set(by_a) & set(by_b))
            if seeds:  # one value per block: the mean over the seeds both are read in
                first.append(float(np.mean([by_a[s]["auc"] for s in seeds])))
                second.append(float(np.mean([by_b[s]["auc"] for s in seeds])))
        row: dict[str, Any] = {"a": a, "b": b, "blocks": len(first)}
        row |= {"tost_p": None, "t_p": None, "tost_holm": None, "t_holm": None}
        row["difference"] = float(np.mean(np.subtract(first, second))) if first else None
        if len(first) >= MIN_BLOCKS:
            x, y = np.array(first), np.array(second)
            with np.errstate(divide="ignore", invalid="ignore"):  # identical differences: t = ±inf
                row["tost_p"] = float(ttost_paired(x, y, -EQUIVALENCE, EQUIVALENCE)[0])
                t_p = float(ttest_rel(x, y).pvalue)
            row["t_p"] = 1.0 if math.isnan(t_p) else t_p  # no spread and no difference: nothing shown
        rows.append(row)
    tested = [r for r in rows if r["tost_p"] is not None]
    for key in ("tost", "t"):
        adjusted = multipletests([r[f"{key}_p"] for r in tested], method="holm")[1] if tested else []
        for r, p in zip(tested, adjusted, strict=True):
            r[f"{key}_holm"] = float(p)
    for r in rows:
        r["equivalent"] = r["tost_holm"] is not None and r["tost_holm"] < ALPHA
        r["different"] = r["t_holm"] is not None and r["t_holm"] < ALPHA
        r["verdict"] = verdict(r)
    return rows


def verdict(row: dict[str, Any]) -> str:
    """What the page says of one pair: "equivalent" only where the TOST rejected after Holm."""
    if row["tost_p"] is None:
        return "too few blocks to test equivalence"
    said = []
    if row["equivalent"]:
        said.append(
            f"equivalent within ±{EQUIVALENCE} AUC (TOST p {row['tost_p']:.2g}, Holm {row['tost_holm']:.2g})"
        )
    if row["different"]:
        said.append(f"different (paired t p {row['t_p']:.2g}, Holm {row['t_holm']:.2g})")
    return "; ".join(said) or "not shown different, not shown equivalent"


def _offset_name(offset: float) -> str:
    return f"base − {offset:g}"


def _kind(row: dict[str, Any]) -> str:
    """The pair's verdict without its p-values, for the per-level counts."""
    if row["tost_p"] is None:
        return "too few blocks to test equivalence"
    if row["equivalent"]:
        return f"equivalent within ±{EQUIVALENCE} AUC"
    return "different" if row["different"] else "not shown different, not shown equivalent"


def _block_means(values: dict[Block, dict[str, dict[int, dict]]]) -> dict[Block, dict[str, float]]:
    return {
        b: {n: float(np.mean([r["auc"] for r in s.values()])) for n, s in ts.items()}
        for b, ts in values.items()
    }


def _technique_table(reading: dict[str, Any]) -> list[str]:
    """Technique × level: the mean over the blocks it is read in of its block mean, and how many."""
    means = {d: _block_means(reading["values"][d]) for d in OFFSETS}
    names = sorted({n for by_block in means.values() for ts in by_block.values() for n in ts})
    body = []
    for name in names:
        cells = []
        for d in OFFSETS:
            here = [ts[name] for ts in means[d].values() if name in ts]
            cells.append(f"{_fmt(float(np.mean(here)))} ({len(here)})" if here else "-")
        body.append([name, *cells])
    header = ["technique", *(f"{_offset_name(d)} nats" for d in OFFSETS)]
    return [
        "Mean AUC over the blocks a technique is read in (how many):",
        "",
        markdown_table(header, body),
        "",
    ]


def _level_line(offset: float, reading: dict[str, Any], found_pairs: list[dict[str, Any]]) -> str:
    """One level's summary: its span over the splits, Friedman's test, and the pairs' verdicts counted."""
    values = reading["values"][offset]
    levels = [level_of(base, offset) for base in reading["bases"].values()]
    low, high = f"{min(levels):.2f}", f"{max(levels):.2f}"
    span = low if low == high else f"{low}-{high}"
    text = f"- **{_offset_name(offset)} nats** ({span} nats): "
    if not values:
        return text + "no technique is read in any split."
    battery = run(_block_means(values))
    if battery is not None and battery.friedman:
        text += (
            f"Friedman p = {battery.friedman['p_value']:.2g} over {len(battery.blocks)} complete blocks of "
            f"{len(battery.names)} techniques; "
        )
    if not found_pairs:
        return text + "one technique read, no pair."
    counts: dict[str, int] = {}
    for r in found_pairs:
        counts[_kind(r)] = counts.get(_kind(r), 0) + 1
    return text + f"of {len(found_pairs)} pairs: " + "; ".join(f"{n} {k}" for k, n in counts.items()) + "."


def _details(summary: str, header: list[str], body: list[list[Any]]) -> list[str]:
    return [f"<details><summary>{summary}</summary>", "", markdown_table(header, body), "", "</details>", ""]


def matched_section(found: Trajectories[Row], out: Path | None = None) -> list[str]:
    """The ``### At matched utility`` section of ``findings.md`` (:func:`matched`, :func:`pairs`)."""
    reading = matched(found, out)
    percents = ", ".join(f"{100 * (1 - math.exp(-d)):.0f} %" for d in OFFSETS)
    lines = [
        "### At matched utility",
        "",
        f"Per split, each level is a fixed distance below the base's own validation NLL (the `none` cell's): "
        f"{', '.join(f'{d:g}' for d in OFFSETS)} nats (perplexity {percents} below the base's), so no level "
        "depends on which techniques the sweep holds. A technique is read at a level where its trajectory "
        "first comes down to it (AUC interpolated between the two checkpoints around the crossing); one that "
        "never does, or starts at or below it, is not read there. Each pair is compared over the blocks where "
        "both are read (per block, the mean over the seeds both are read in): two one-sided paired t tests "
        f"for equivalence within a margin of ±{EQUIVALENCE} AUC fixed before any run (TOST, statsmodels "
        "`ttost_paired`) and a paired t test for a difference, each Holm-corrected over the level's pairs. "
        f"A pair is called equivalent only where TOST rejects; with fewer than {MIN_BLOCKS} common blocks, "
        "neither test runs.",
        "",
    ]
    for (block, seed), reason in sorted(reading["none"].items()):
        lines.append(f"- {block[0]} × {block[1]}, seed {seed}: **no common utility level** ({reason}).")
    if reading["none"]:
        lines.append("")
    if not any(reading["values"].values()):
        return lines + [
            "No trajectory comes down to any level: **no common utility level** in any split.",
            "",
        ]
    lines += _technique_table(reading)
    every_pair, every_reading = [], []
    for offset in OFFSETS:
        found_pairs = pairs(reading["values"][offset])
        lines.append(_level_line(offset, reading, found_pairs))
        for r in found_pairs:
            difference = "-" if r["difference"] is None else f"{r['difference']:+.3f}"
            every_pair.append(
                [_offset_name(offset), f"{r['a']} − {r['b']}", r["blocks"], difference, r["verdict"]]
            )
        for block, techniques in sorted(reading["values"][offset].items()):
            for name, by_seed in sorted(techniques.items()):
                for seed, r in sorted(by_seed.items()):
                    interval = f"{'' if r['delong'] else '~'}[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
                    between = f"{r['between'][0]:g}-{r['between'][1]:g}"
                    every_reading.append(
                        [_offset_name(offset), *block, seed, name, _fmt(r["auc"]), interval, between]
                    )
    lines.append("")
    if every_pair:
        lines += _details(
            "Every pair at each level", ["level", "pair", "blocks", "mean difference", "verdict"], every_pair
        )
    header = [
        "level",
        "model",
        "dataset",
        "seed",
        "technique",
        "AUC at the level",
        "95% CI",
        "between epochs",
    ]
    lines += _details("Every reading at the levels", header, every_reading)
    unread = [
        [_offset_name(d), *block, seed, name, why]
        for d in OFFSETS
        for (block, seed, name), why in sorted(reading["missed"][d].items())
    ]
    if unread:
        header = ["level", "model", "dataset", "seed", "technique", "why not read"]
        lines += _details("Trajectories not read at a level", header, unread)
    return lines
