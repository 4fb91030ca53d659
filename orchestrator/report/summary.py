"""Mean ± std AUC per group of leaderboard rows at each cell's last checkpoint: what the leaderboard
files, the HTML page and ``privauditor report`` print (``findings.md`` compares checkpoints).

These read a few columns of any row of the leaderboard's columns: a results folder's rows
(:data:`~privauditor.orchestrator.report.row_schema.Row`) and the board's cell and setting rows alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

#: a row of the leaderboard's columns (:func:`final` returns the rows it is given, of their own type)
R = TypeVar("R", bound=Mapping[str, Any])

SUMMARY_HEADER = ["AUC mean ± std", "std over", "rows"]


def technique(row: Mapping[str, Any]) -> str:
    """A row's technique as summaries group it: the adaptation, with its defence if it has one (the cell
    id's technique part, e.g. ``full+dp-e1``), so defended and undefended cells are never pooled."""
    from privauditor.tasks.spec.resolved import technique_of

    return (
        row["adaptation"]
        if row.get("defence", "none") == "none"
        else technique_of(row["cell_id"], row["adaptation"])
    )


def final(found: Sequence[R]) -> list[R]:
    """The rows of each cell's last checkpoint (a trajectory's earlier checkpoints are left out)."""
    last: dict[str, int] = {}
    for row in found:
        if row["epoch"] is not None:
            last[row["cell_id"]] = max(last.get(row["cell_id"], row["epoch"]), row["epoch"])
    return [r for r in found if r["epoch"] is None or r["epoch"] == last[r["cell_id"]]]


def cells_of(
    rows: Sequence[Mapping[str, Any]], unit: str = "cell_id"
) -> tuple[set[Any], dict[str, set[Any]]]:
    """Every ``unit`` (cell) the rows hold, and per attack the cells it has a row in."""
    cells: dict[str, set[Any]] = {}
    for row in rows:
        cells.setdefault(row["attack"], set()).add(row[unit])
    return set().union(*cells.values()) if cells else set(), cells


def apart(rows: Sequence[Mapping[str, Any]], unit: str = "cell_id") -> dict[str, set[Any]]:
    """The attacks that lack a row in some of the rows' cells (they abstained on every text there, or were
    skipped), with the cells they have. Means compare attacks over the same cells, so these are shown apart
    (:func:`apart_table`) and left out of every mean over attacks (:func:`summary`)."""
    every, cells = cells_of(rows, unit)
    return {attack: found for attack, found in cells.items() if found != every}


def summary(found: Sequence[Mapping[str, Any]], by: str) -> list[list[Any]]:
    """Mean ± std AUC per value of ``by`` (e.g. adaptation) at each cell's last checkpoint, best first;
    per adaptation, over the attacks that read the model (model-free controls left out). Only attacks with
    a row in every cell count (:func:`apart`): per attack, every mean is over the same cells; per
    adaptation, over the same attacks. With several seeds the std is across seeds (of each seed's mean over
    the group's rows), else across the group's rows."""
    import numpy as np

    rows = final(found)
    left_out = apart(rows)
    groups: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        if row["attack"] in left_out:
            continue  # not over the cells (or, per adaptation, the attacks) the others are
        if by == "adaptation" and row.get("access") == "model-free":
            continue  # a control (blind) never reads the model: it says nothing about a technique
        key = technique(row) if by == "adaptation" else str(row[by])
        groups.setdefault(key, {}).setdefault(row["seed"], []).append(row["auc"])
    table = []
    for key, seeds in groups.items():
        every = [auc for aucs in seeds.values() for auc in aucs]
        if len(seeds) > 1:
            means = [float(np.mean(aucs)) for aucs in seeds.values()]
            mean, std, over = np.mean(means), np.std(means, ddof=1), f"{len(seeds)} seeds"
        else:
            mean, std, over = np.mean(every), np.std(every), "rows"
        table.append([key, f"{mean:.3f} ± {std:.3f}", over, len(every)])
    return sorted(table, key=lambda r: -float(r[1].split()[0]))


APART_HEADER = ["attack", "cells with a row", "AUC mean over them", "strongest compared attack over them"]


def apart_table(
    found: Sequence[Mapping[str, Any]], unit: str = "cell_id", last: bool = True
) -> list[list[Any]]:
    """Per attack left out of the summaries (:func:`apart`): in how many of the cells it has a row, its mean
    AUC over those, and the compared attack of highest mean AUC over the same cells (``last``: at each
    cell's last checkpoint; else ``found`` holds one row per cell and attack already)."""
    import numpy as np

    rows = final(found) if last else found
    every, _ = cells_of(rows, unit)
    left_out = apart(rows, unit)
    table = []
    for attack, cells in sorted(left_out.items()):
        aucs: dict[str, list[float]] = {}
        for row in rows:
            if row[unit] in cells:
                aucs.setdefault(row["attack"], []).append(row["auc"])
        means = {a: float(np.mean(v)) for a, v in aucs.items() if a not in left_out}  # each over every one
        best = max(means, key=lambda a: means[a]) if means else None
        table.append([
            attack,
            f"{len(cells)} of {len(every)}",
            f"{np.mean(aucs[attack]):.3f}",
            "-" if best is None else f"{best} {means[best]:.3f}",
        ])  # fmt: skip
    return table
