"""Findings: what a results folder says about the paper's question, with controls and significance.

``privauditor report DIR`` writes ``findings.md`` into the folder and prints it. Every view compares
techniques under one attack (``--attack``, default ``loss``: the attack every other one refines, and a
cheap one, so it runs at every checkpoint) and states its rule:

- **equal epochs**: every technique's AUC at each checkpoint epoch of the sweep's common schedule;
- **best validation**: at each cell's checkpoint of lowest validation NLL (what a practitioner ships);
- **matched utility**, per (model, dataset, seed): the level L is the highest of the techniques' lowest
  validation NLLs, the best utility every trained technique reaches. A technique's AUC at L is read where
  its trajectory first comes down to L, interpolated linearly in NLL between the checkpoints around the
  crossing; a trajectory that is already below L at its first checkpoint is read there (flagged ``*``:
  at a better utility than L); later crossings (an NLL that rises and falls again) are ignored, the first
  is what a user training longer would meet first. ``none`` has no trajectory and is left out.
- **significance**: techniques of one (model, dataset, seed) share their split, so each pair is compared
  paired (the same members and non-members, aligned by sample id) with DeLong's test for correlated AUCs,
  Holm-corrected over all pairs of the group (:mod:`privauditor.tasks.significance`); with several seeds,
  a two-level bootstrap (seeds, then samples) gives a seed-level CI of each mean difference.
- **controls**: per split, the model-free ``blind`` attack's AUC and its label-permutation test (Holm over
  splits) and the un-adapted base's (``none``) AUC.

These views compare techniques without a defence; DP cells, DP violations (listed first, as bugs) and
duplication have their own sections (:mod:`privauditor.orchestrator.defences`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from .defences import defence_table, duplication_table, violations

PRIMARY_ATTACK = "loss"
ALPHA = 0.05

CAVEAT = (
    "These bases have about a million parameters and were pre-trained for minutes on a small corpus; a "
    "7-B model has seen far more text, memorises faster per epoch and starts from a much lower loss on "
    "these records. What transfers is the method (equal budgets, matched utility, paired tests, controls); "
    "the size of each AUC, and possibly the order of techniques, need re-measuring at scale."
)


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def _fmt(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"


def _table(header: list[str], body: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in body])


def trajectories(rows: list[dict[str, Any]], attack: str) -> dict[tuple, dict[str, list[dict]]]:
    """(model, dataset, seed) → technique → its rows of ``attack``, one per checkpoint, by epoch."""
    found: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["attack"] == attack and row["epoch"] is not None and row.get("defence", "none") == "none":
            found[(row["model"], row["dataset"], row["seed"])][row["adaptation"]].append(row)
    for techniques in found.values():
        for points in techniques.values():
            points.sort(key=lambda r: r["epoch"])
    return found


def matched_level(techniques: dict[str, list[dict]]) -> float | None:
    """The highest of the trained techniques' lowest validation NLLs (None with no trained technique)."""
    lows = [min(r["utility_loss"] for r in points) for name, points in techniques.items() if name != "none"]
    return max(lows) if lows else None


def at_level(points: list[dict], level: float) -> tuple[float, bool]:
    """(AUC where the trajectory first comes down to ``level``, whether it was below it from the start)."""
    if points[0]["utility_loss"] <= level:
        return points[0]["auc"], True
    for before, after in zip(points, points[1:], strict=False):
        if after["utility_loss"] <= level:
            share = (before["utility_loss"] - level) / (before["utility_loss"] - after["utility_loss"])
            return before["auc"] + share * (after["auc"] - before["auc"]), False
    raise ValueError("the level is below the trajectory's lowest NLL")  # cannot happen by construction


def _scores(out: Path, row: dict[str, Any], attack: str) -> dict[str, tuple[bool, float]] | None:
    """sample id → (member, score) of ``attack`` at the row's checkpoint; None where the per-sample file
    is not at hand (results on an object store keep only summaries in the local stage)."""
    import pyarrow.parquet as pq

    record = json.loads((out / "cells" / row["cell_id"] / "cell.json").read_text())
    path = next(c["path"] for c in record["checkpoints"] if c["epoch"] == row["epoch"])
    file = out / "cells" / row["cell_id"] / path / "scores.parquet"
    if not file.exists():
        return None
    table = pq.ParquetFile(file).read().to_pylist()
    return {r["sample_id"]: (r["member"], r["score"]) for r in table if r["attack"] == attack}


def paired(out: Path, chosen: dict[str, dict], attack: str) -> list[dict[str, Any]]:
    """DeLong + Holm over every pair of the techniques' ``chosen`` rows (one per technique, one split) that
    were scored on the same samples (a sweep whose overrides give some techniques other split sizes)."""
    from privauditor.tasks.significance import paired_comparisons

    loaded = {name: _scores(out, row, attack) for name, row in chosen.items()}
    by_samples: dict[tuple, dict[str, dict]] = defaultdict(dict)  # techniques scored on the same samples
    for name, found in loaded.items():
        if found:
            by_samples[tuple(sorted(found))][name] = found
    tests = []
    for ids, techniques in by_samples.items():
        if len(techniques) < 2:
            continue
        member = np.array([next(iter(techniques.values()))[i][0] for i in ids], dtype=bool)
        scores = {name: np.array([found[i][1] for i in ids]) for name, found in techniques.items()}
        tests += paired_comparisons(member, scores, ALPHA)
    return tests


def _ranking(title: str, chosen: dict[tuple, dict[str, dict]], out: Path, attack: str) -> list[str]:
    """Mean AUC per technique over the groups, and the significant pairs of every group."""
    means: dict[str, list[float]] = defaultdict(list)
    for techniques in chosen.values():
        for name, row in techniques.items():
            means[name].append(row["auc"])
    ranked = sorted(means, key=lambda n: -_mean(means[n]))
    lines = [f"### {title}", "", _table(["rank", "technique", f"{attack} AUC (mean)", "groups"],
             [[i + 1, n, _fmt(_mean(means[n])), len(means[n])] for i, n in enumerate(ranked)])]  # fmt: skip
    significant, tested = [], 0
    for (model, dataset, seed), techniques in sorted(chosen.items()):
        for test in paired(out, techniques, attack):
            tested += 1
            if test["significant"]:
                # written as higher − lower: the CI of b − a is that of a − b negated and swapped
                flip = test["difference"] < 0
                high, low = (test["b"], test["a"]) if flip else (test["a"], test["b"])
                ci = (-test["ci_high"], -test["ci_low"]) if flip else (test["ci_low"], test["ci_high"])
                significant.append([model, dataset, seed, f"{high} > {low}", f"{abs(test['difference']):.3f}",
                                    f"[{ci[0]:.3f}, {ci[1]:.3f}]", f"{test['p_holm']:.2g}"])  # fmt: skip
    lines += ["", f"Paired DeLong tests, Holm over each group's pairs: {len(significant)} of {tested} "
              f"differences significant at {ALPHA}."]  # fmt: skip
    if significant:
        header = ["model", "dataset", "seed", "order", "difference", "95% CI (higher − lower)", "p (Holm)"]
        lines += ["", _table(header, significant)]
    return lines + [""]


def _controls(out: Path, rows: list[dict[str, Any]], attack: str) -> list[str]:
    from privauditor.tasks.significance import holm_adjusted

    blind: dict[tuple, dict[str, Any]] = {}
    base: dict[tuple, float] = {}
    for row in rows:
        key = (row["dataset"], row["seed"])
        if row["attack"] == "blind" and key not in blind:
            blind[key] = {"auc": row["auc"]} | _shift(out, row["cell_id"])
        if row["adaptation"] == "none" and row["attack"] == attack:
            base[(row["model"], *key)] = row["auc"]
    lines = ["## Controls", ""]
    if blind:
        adjusted = holm_adjusted([b.get("p_value", 1.0) for b in blind.values()])
        body = []
        for (key, b), p in zip(blind.items(), adjusted, strict=True):
            status = "SHIFTED: attacks may measure the shift" if p <= ALPHA else "no shift detected"
            body.append([*key, _fmt(b["auc"]), _fmt(b.get("null_auc_mean")), f"{p:.3g}", status])
        lines += [
            "Model-free `blind` classifier per split (out-of-fold AUC; its permutation null's mean sits "
            "below 0.5, so the split is judged by the permutation p-value, Holm over splits):",
            "",
            _table(["dataset", "seed", "blind AUC", "null mean", "p (Holm)", "status"], body),
            "",
        ]
    else:
        lines += ["No `blind` attack ran: no split was tested for a shift.", ""]
    if base:
        body = [[*k, _fmt(v)] for k, v in sorted(base.items())]
        lines += [f"The un-adapted base (`none`) under `{attack}`:", "", _table(["model", "dataset", "seed", "AUC"], body), ""]  # fmt: skip
    else:
        lines += ["No `none` cell ran: there is no un-adapted control.", ""]
    return lines


def _shift(out: Path, cell_id: str) -> dict[str, Any]:
    """The blind view's stored permutation test of a cell's split."""
    import pyarrow.parquet as pq

    from privauditor.tasks.views.blind import METADATA

    record = json.loads((out / "cells" / cell_id / "cell.json").read_text())
    for checkpoint in record["checkpoints"]:
        relative = checkpoint["views"].get("blind", {}).get("blind")
        if relative and (out / relative).exists():
            return json.loads(pq.read_schema(out / relative).metadata[METADATA])
    return {}


def findings(out: Path, rows: list[dict[str, Any]], attack: str = PRIMARY_ATTACK) -> str:
    """``findings.md`` of the results folder ``out`` whose leaderboard rows are ``rows``."""
    out = Path(out)
    groups = trajectories(rows, attack)
    seeds = sorted({seed for _, _, seed in groups})
    lines = ["# Findings", "", f"Attack compared: `{attack}`. {len(groups)} (model, dataset, seed) groups, "
             f"{len(seeds)} seed(s).", ""]  # fmt: skip
    lines += violations(rows)
    extra = defence_table(rows, attack) + duplication_table(out, rows, attack)
    if not groups:
        return "\n".join(lines + [f"No finished undefended cell ran `{attack}`.", ""] + extra)
    epochs = sorted({r["epoch"] for ts in groups.values() for ps in ts.values() for r in ps})
    by_epoch: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for techniques in groups.values():
        for name, points in techniques.items():
            for r in points:
                by_epoch[name][r["epoch"]].append(r["auc"])
    lines += [
        "## AUC at equal epochs",
        "",
        "Mean AUC over groups at each checkpoint epoch (`none`: epoch 0):",
        "",
    ]

    def growth(name: str) -> float:  # from the technique's first checkpoint to its last
        own = sorted(by_epoch[name])
        return (
            _mean(by_epoch[name][own[-1]]) - _mean(by_epoch[name][own[0]]) if len(own) > 1 else float("nan")
        )

    body = [
        [n, *(_fmt(_mean(by_epoch[n].get(e, []))) for e in epochs), _fmt(growth(n))] for n in sorted(by_epoch)
    ]
    lines += [_table(["technique", *(f"epoch {e}" for e in epochs), "growth (first to last)"], body), ""]
    last = {g: {n: ps[-1] for n, ps in ts.items()} for g, ts in groups.items()}
    best = {
        g: {n: next((r for r in ps if r["best"]), ps[-1]) for n, ps in ts.items()} for g, ts in groups.items()
    }
    lines += ["## Rankings", ""]
    lines += _ranking("At the last checkpoint (equal epochs)", last, out, attack)
    lines += _ranking("At each cell's best-validation checkpoint", best, out, attack)
    lines += _matched(groups)
    lines += _controls(out, rows, attack)
    if len(seeds) == 1:
        lines += ["One seed: the seed-level CI of every difference is null (run more seeds to get one).", ""]
    else:
        lines += ["## Across seeds (last checkpoint)", ""] + _seed_level(last, out, attack)
    return "\n".join(lines + extra + ["## Caveat", "", CAVEAT, ""])


def _matched(groups: dict[tuple, dict[str, list[dict]]]) -> list[str]:
    lines = ["## AUC at matched utility", ""]
    values: dict[str, list[float]] = defaultdict(list)
    flagged: set[str] = set()
    levels = []
    for techniques in groups.values():
        level = matched_level(techniques)
        if level is None:
            continue
        levels.append(level)
        for name, points in techniques.items():
            if name != "none":
                auc, early = at_level(points, level)
                values[name].append(auc)
                if early:
                    flagged.add(name)
    if not values:
        return lines + ["No trained technique: nothing to match.", ""]
    ranked = sorted(values, key=lambda n: -_mean(values[n]))
    body = [[n + (" *" if n in flagged else ""), _fmt(_mean(values[n])), len(values[n])] for n in ranked]
    lines += [f"Validation-NLL level per group: from {min(levels):.3f} to {max(levels):.3f} nats.", "",
              _table(["technique", "AUC at the level (mean)", "groups"], body), ""]  # fmt: skip
    if flagged:
        lines += ["`*`: below the level from its first checkpoint in some group (read there).", ""]
    return lines


def _seed_level(chosen: dict[tuple, dict[str, dict]], out: Path, attack: str) -> list[str]:
    """With several seeds: per (model, dataset) and pair, the seed-level CI of the mean AUC difference."""
    from privauditor.tasks.significance import seed_level_ci

    by_pair: dict[tuple, dict[int, dict[str, dict]]] = defaultdict(dict)
    for (model, dataset, seed), techniques in chosen.items():
        by_pair[(model, dataset)][seed] = techniques
    body = []
    for (model, dataset), seeds in sorted(by_pair.items()):
        if len(seeds) < 2:
            continue
        loaded = {seed: {n: _scores(out, r, attack) for n, r in ts.items()} for seed, ts in seeds.items()}
        common = set.intersection(*({n for n, s in ts.items() if s} for ts in loaded.values()))
        for a, b in combinations(sorted(common), 2):
            if any(sorted(ts[a]) != sorted(ts[b]) for ts in loaded.values()):
                continue  # scored on other samples: not a paired comparison
            member, first, second = [], [], []
            for techniques in loaded.values():
                ids = sorted(techniques[a])
                member.append(np.array([techniques[a][i][0] for i in ids], dtype=bool))
                first.append(np.array([techniques[a][i][1] for i in ids]))
                second.append(np.array([techniques[b][i][1] for i in ids]))
            low, high = seed_level_ci(member, first, second)
            if low > 0 or high < 0:
                body.append([model, dataset, len(seeds), f"{a} − {b}", f"[{low:.3f}, {high:.3f}]"])
    if not body:
        return ["Seed-level 95% CIs (seeds, then samples): no mean difference excludes 0.", ""]
    header = ["model", "dataset", "seeds", "difference", "seed-level 95% CI"]
    return ["Seed-level 95% CIs (seeds, then samples) that exclude 0:", "", _table(header, body), ""]
