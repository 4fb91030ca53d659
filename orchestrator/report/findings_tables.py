"""The defence and duplication views of ``findings.md``.

- **Defences**: per (model, dataset, seed, technique), the DP cells against the same technique without a
  defence (ε = ∞), each at its cell's last checkpoint (where a DP run has spent its target ε): the attack's
  AUC with its CI, the validation NLL (utility), the ε spent and the empirical lower bound on ε with the
  most the sample could show (its ceiling), for the compared attack and for the attack with the highest
  bound.
- **DP violations**: every (cell, checkpoint, attack) whose empirical bound exceeds the ε the checkpoint
  claims to have spent. Each is a bug in the DP training or its accounting, listed first.
- **Duplication**: for cells that train some members several times, the AUC of each group of members (by
  times trained) against the non-members, and of repeated members against singletons, at every
  checkpoint.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from privauditor.tasks.infra.results import Results
from privauditor.tasks.spec.resolved import technique_of

from .formats import markdown_table
from .row_schema import Row
from .summary import final


def _fmt(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"


def violations(rows: list[Row]) -> list[str]:
    """One line per DP checkpoint whose one-run canary bound on ε exceeds the ε it spent (none: [])."""
    found = {(r["cell_id"], r["epoch"]): r for r in rows if r.get("dp_violation")}
    if not found:
        return []
    lines = ["## DP violations", "",
             "**Each line is a bug**: the one-run lower bound on ε over the cell's canaries (Steinke et al. 2023, "
             "add/remove adjacency, 95 % confidence, Bonferroni over the canary kinds and guess counts) "
             "exceeds the ε the DP run claims to have spent.", ""]  # fmt: skip
    for (cell_id, epoch), r in sorted(found.items()):
        lines.append(
            f"- `{cell_id}` epoch {epoch}: ε ≥ {r['eps_one_run']:.3f} over {r['one_run_canaries']} "
            f"`{r['one_run_kind']}` canaries (δ = {r['delta']:.2g}) against a claimed {r['epsilon']:.3f}"
        )
    return lines + [""]


def defence_table(rows: list[Row], attack: str) -> list[str]:
    """The defences section (empty without a DP cell)."""
    last = final(rows)
    if not any(r["defence"] != "none" for r in last):
        return []
    defended = {
        (r["model"], r["dataset"], r["seed"], r["adaptation"]) for r in last if r["defence"] != "none"
    }
    by_cell: dict[str, list[Row]] = defaultdict(list)
    for r in last:
        if (r["model"], r["dataset"], r["seed"], r["adaptation"]) in defended:
            by_cell[r["cell_id"]].append(r)
    body = []
    for cell_rows in by_cell.values():
        own = next((r for r in cell_rows if r["attack"] == attack), None)
        if own is None:
            continue
        top = max(cell_rows, key=lambda r: r["eps_lower"] or 0.0)
        eps = _target(own)
        noise = "" if "-nonoise" not in own["cell_id"] else " (no noise: control)"
        body.append([
            own["model"], own["dataset"], own["seed"], own["adaptation"], eps + noise, _fmt(own["epsilon"]),
            f"{own['auc']:.3f} [{own['auc_ci_low']:.3f}, {own['auc_ci_high']:.3f}]", _fmt(own["utility_loss"]),
            f"{_fmt(own['eps_lower'])} ({_fmt(own['eps_ceiling'])})",
            f"{_fmt(top['eps_lower'])} `{top['attack']}`" if top["eps_lower"] else "-",
            _fmt(own.get("pii_reconstructed_difference")),
            "-" if own.get("exposure_top") is None else f"{_fmt(own['exposure_top'])} (r = {own['exposure_repeats']})",
        ])  # fmt: skip
    body.sort(key=lambda b: (b[0], b[1], b[2], b[3], b[4] == "∞", b[4]))
    header = ["model", "dataset", "seed", "technique", "ε target", "ε spent", f"`{attack}` AUC [95% CI]",
              "val NLL", f"`{attack}` ε bound (ceiling)", "highest ε bound", "PII fields given back (difference)",
              "canary exposure, bits"]  # fmt: skip
    return ["## Defences", "",
            "Each DP cell beside the same technique without a defence (ε target ∞), at the last checkpoint. "
            "The ε bound is Jagielski et al.'s Clopper-Pearson lower bound at the cell's δ (Bonferroni over "
            "thresholds); the ceiling is the most this many scored records could show, so a bound at its "
            "ceiling says \"at least this much\" and no more. Beyond membership: the members' rate of PII fields "
            "given back less the non-members' (docs/extraction.md), and with canaries their mean exposure at the "
            "most repetitions.", "",
            markdown_table(header, body), ""]  # fmt: skip


def duplication_table(out: Path, rows: list[Row], attack: str) -> list[str]:
    """The duplication section (empty without a cell that repeats members)."""
    chosen = [r for r in rows if r["attack"] == attack and r.get("auc_repeated_vs_singleton") is not None]
    if not chosen:
        return []
    found = []
    for r in chosen:
        folder = Results(out).cell(r["cell_id"])
        path = next(c["path"] for c in folder.record()["checkpoints"] if c["step"] == r["step"])
        metrics = folder.metrics(path)[attack]
        found.append((r, metrics["auc_by_repeats"]))
    counts = sorted({int(k) for _, by in found for k in by})
    body = [
        [r["model"], r["dataset"], r["seed"], technique_of(r["cell_id"], r["adaptation"]), r["epoch"],
         *(_fmt(by.get(str(c))) for c in counts), _fmt(r["auc_repeated_vs_singleton"])]
        for r, by in sorted(found, key=lambda x: (x[0]["cell_id"], x[0]["step"]))
    ]  # fmt: skip
    header = ["model", "dataset", "seed", "technique", "epoch", *(f"AUC, trained {c}×" for c in counts),
              "repeated vs singletons"]  # fmt: skip
    return ["## Duplication", "",
            f"`{attack}` AUC of each group of members, by how many times one run trained them, against the "
            "same non-members, and the AUC of repeated members against singletons (0.5: no difference), at "
            "every checkpoint:", "",
            markdown_table(header, body), ""]  # fmt: skip


def one_run_table(out: Path, rows: list[Row]) -> list[str]:
    """The one-run DP audit section: per cell at its last checkpoint, each canary kind's lower bound on ε
    with its ceiling, and the largest over the target (empty without an audited cell)."""
    last = [r for r in final(rows) if r.get("eps_one_run") is not None]
    cells = {r["cell_id"]: r for r in last}
    if not cells:
        return []
    found = []
    for cell_id, r in cells.items():
        checkpoint = next(
            c for c in Results(out).cell(cell_id).record()["checkpoints"] if c["step"] == r["step"]
        )
        found.append((r, checkpoint["extraction"]["one_run"]))
    kinds = sorted({k for _, audit in found for k in audit["kinds"]})
    body = []
    for r, audit in sorted(found, key=lambda x: (x[0]["model"], x[0]["adaptation"], x[0]["cell_id"])):
        target = r["epsilon_target"]
        by = audit["kinds"]
        bounds = [
            f"{_fmt(by[k]['eps_lower'])} ({_fmt(by[k]['eps_ceiling'])})" if k in by else "-" for k in kinds
        ]
        ratio = "-" if target is None else _fmt(audit["eps_lower"] / target)
        body.append([r["model"], technique_of(r["cell_id"], r["adaptation"]), _target(r), *bounds, ratio,
                     "yes" if r.get("dp_violation") else ""])  # fmt: skip
    m = sorted({b["m"] for _, audit in found for b in audit["kinds"].values()})
    header = ["model", "technique", "ε target", *(f"`{k}` ε̂ (ceiling)" for k in kinds), "ε̂ / ε", "violation"]
    return ["## One-run DP audit", "",
            f"Steinke et al. 2023's one-run lower bound on ε over canaries each trained by its own fair coin "
            f"({', '.join(map(str, m))} per kind), at the last checkpoint: add/remove adjacency, 95 % with "
            "Bonferroni over the kinds and the guess counts, so each ε̂ is a lower bound and ε̂ / ε the share of the "
            "claim it confirms. Cells with `-noise` in the technique are planted bugs (noise below the σ the "
            "accounting assumes): controls, outside every ranking and every table by technique.", "",
            *_by_technique(found, kinds), "### Per cell", "",
            markdown_table(header, body), ""]  # fmt: skip


def _by_technique(found: list[tuple[Row, dict]], kinds: list[str]) -> list[str]:
    """Per DP target ε, a table of ε̂ / ε per technique (rows) and canary kind (columns): the mean over
    the technique's cells (models, datasets, seeds) and their range."""
    honest = [
        (r, a) for r, a in found
        if r["epsilon_target"] is not None and "noise" not in technique_of(r["cell_id"], r["adaptation"])
    ]  # fmt: skip
    lines = []
    for target in sorted({float(r["epsilon_target"] or 0) for r, _ in honest}):
        by: dict[str, list[dict]] = defaultdict(list)
        for r, audit in honest:
            if r["epsilon_target"] == target:
                by[r["adaptation"]].append(audit["kinds"])
        body = [[technique, str(len(cells)),
                 *(_ratio([c[k]["eps_lower"] / target for c in cells if k in c]) for k in kinds)]
                for technique, cells in sorted(by.items())]  # fmt: skip
        lines += [f"### ε̂ / ε at ε = {target:g}, by technique", "",
                  "Mean over the technique's cells [lowest, highest]; 0: no bound above 0.", "",
                  markdown_table(["technique", "cells", *(f"`{k}`" for k in kinds)], body), ""]  # fmt: skip
    return lines


def _ratio(values: list[float]) -> str:
    if not values:
        return "-"
    mean = sum(values) / len(values)
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} [{min(values):.3f}, {max(values):.3f}]"


def _target(r: Row) -> str:
    return "∞" if r["epsilon_target"] is None else f"{r['epsilon_target']:g}"


def where_ran(out: Path, rows: list[Row]) -> list[str]:
    """Where each cell ran (its ``cell.json``'s Ray node type and node), one line per cell, when the cells
    ran on more than one node or on nodes an autoscaler launched; nothing for a run on one machine."""
    results = Results(out)
    runtimes = {}
    for cell_id in sorted({r["cell_id"] for r in rows}):
        folder = results.cell(cell_id)
        runtimes[cell_id] = folder.record().get("runtime", {}) if folder.has_record else {}
    nodes = {r.get("ray_node_id") for r in runtimes.values()} - {None}
    if len(nodes) < 2 and not any("ray_node_type" in r for r in runtimes.values()):
        return []
    lines = ["## Where the cells ran", ""]
    for cell_id, runtime in runtimes.items():
        kind, node = runtime.get("ray_node_type", "a node"), runtime.get("ray_node_id")
        lines.append(f"- `{cell_id}`: {kind}" + (f" (Ray node `{node}`)" if node else ", not recorded"))
    return lines + [""]
