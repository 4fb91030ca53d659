"""Mean ± std AUC per group of leaderboard rows at each cell's last checkpoint: what the leaderboard
files, the HTML page and ``privauditor report`` print (``findings.md`` compares checkpoints)."""

from __future__ import annotations

from typing import Any

SUMMARY_HEADER = ["AUC mean ± std", "std over", "rows"]


def technique(row: dict[str, Any]) -> str:
    """A row's technique as summaries group it: the adaptation, with its defence if it has one (the cell
    id's technique part, e.g. ``full+dp-e1``), so defended and undefended cells are never pooled."""
    from privauditor.tasks.spec import technique_of

    return (
        row["adaptation"]
        if row.get("defence", "none") == "none"
        else technique_of(row["cell_id"], row["adaptation"])
    )


def final(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of each cell's last checkpoint (a trajectory's earlier checkpoints are left out)."""
    last: dict[str, int] = {}
    for row in found:
        if row["epoch"] is not None:
            last[row["cell_id"]] = max(last.get(row["cell_id"], row["epoch"]), row["epoch"])
    return [r for r in found if r["epoch"] is None or r["epoch"] == last[r["cell_id"]]]


def summary(found: list[dict[str, Any]], by: str) -> list[list[Any]]:
    """Mean ± std AUC per value of ``by`` (e.g. adaptation) at each cell's last checkpoint, best first;
    per adaptation, over the attacks that read the model (model-free controls left out).
    With several seeds the std is across seeds (of each seed's mean over the group's rows), else across
    the group's rows."""
    import numpy as np

    groups: dict[str, dict[int, list[float]]] = {}
    for row in final(found):
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
