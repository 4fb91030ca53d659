"""Merging records of many runs into the board's two tables.

- **Cell rows** (the leaderboard's own columns, :data:`privauditor.orchestrator.leaderboard.COLUMNS`): one
  per (cell, checkpoint, attack). Records of one cell id from several runs are *replicas* of the same
  settings and seed: their figures are averaged and ``runs`` counts them; they are not extra samples.
- **Setting rows** (:data:`SETTING_COLUMNS`): one per (setting, checkpoint, attack), over the seeds of a
  setting (cells whose specs differ only in the seed). ``auc`` is the mean over seeds; with two seeds or
  more ``auc_ci_low/high`` is the t-interval of that mean (``ci_over`` = ``seeds``), with one it is the
  cell's bootstrap CI over samples (``ci_over`` = ``samples``).

Superseded records (named in a later record's ``supersedes``) are left out of both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from privauditor.orchestrator.summary import technique

from .records import rows_of

SETTING_COLUMNS = [
    "setting", "model", "technique", "adaptation", "dataset", "defence", "epsilon_target", "epoch", "last",
    "attack", "access", "n_seeds", "seeds", "runs", "auc", "auc_std", "auc_ci_low", "auc_ci_high", "ci_over",
    "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "n_members", "n_nonmembers", "utility_loss", "epsilon",
    "eps_lower", "eps_ceiling", "dp_violation", "trainable_params", "train_seconds", "cells",
]  # fmt: skip


def live(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records no other record supersedes."""
    gone = {key for r in records for key in r["supersedes"]}
    return [r for r in records if r["key"] not in gone]


def mean_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Field by field: the common value, else the mean of numbers, ``any`` of flags, the first string."""
    merged = {}
    for column in rows[0]:
        values = [r[column] for r in rows if r.get(column) is not None]
        if not values or all(v == values[0] for v in values):
            merged[column] = values[0] if values else None
        elif all(isinstance(v, bool) for v in values):
            merged[column] = any(values)
        elif all(isinstance(v, int | float) for v in values):
            merged[column] = sum(values) / len(values)
        else:
            merged[column] = values[0]
    return merged


def cell_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leaderboard rows of the live records, replicas averaged, sorted by cell, epoch and attack."""
    replicas: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for record in live(records):
        for row in rows_of(record):
            replicas[
                (row["cell_id"], row["epoch"] if row["epoch"] is not None else -1, row["attack"])
            ].append(row)
    return [mean_row(rows) | {"runs": len(rows)} for _, rows in sorted(replicas.items())]


def setting_rows(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (setting, checkpoint, attack) over its seeds, highest AUC first within a setting."""
    from scipy import stats

    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    last: dict[str, int] = {}
    for row in cells:
        groups[(row["setting"], row["epoch"], row["attack"])].append(row)
        if row["epoch"] is not None:
            last[row["setting"]] = max(last.get(row["setting"], row["epoch"]), row["epoch"])
    found = []
    for (setting, epoch, _), rows in groups.items():
        merged, aucs = mean_row(rows), [r["auc"] for r in rows]
        n = len(rows)
        mean = sum(aucs) / n
        std = math.sqrt(sum((a - mean) ** 2 for a in aucs) / (n - 1)) if n > 1 else None
        if n > 1:
            half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
            low, high, over = max(0.0, mean - half), min(1.0, mean + half), "seeds"
        else:
            low, high, over = rows[0]["auc_ci_low"], rows[0]["auc_ci_high"], "samples"
        merged |= {
            "technique": technique(rows[0]), "last": epoch is None or epoch == last.get(setting),
            "n_seeds": n, "seeds": ",".join(str(s) for s in sorted(r["seed"] for r in rows)),
            "runs": sum(r["runs"] for r in rows), "auc": mean, "auc_std": std, "auc_ci_low": low,
            "auc_ci_high": high, "ci_over": over, "cells": " ".join(sorted(r["cell_id"] for r in rows)),
        }  # fmt: skip
        found.append({c: merged.get(c) for c in SETTING_COLUMNS})
    return sorted(found, key=lambda r: (r["model"], r["dataset"], r["technique"], r["epoch"] or 0, -r["auc"]))


def ranking(settings: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Techniques by mean AUC over their settings' last checkpoints and every attack on the model (the
    model-free control, which reads only texts, left out), riskiest first."""
    by: dict[str, list[float]] = defaultdict(list)
    for row in settings:
        if row["last"] and row["access"] != "model-free":
            by[row["technique"]].append(row["auc"])
    return sorted(((t, sum(a) / len(a)) for t, a in by.items()), key=lambda kv: (-kv[1], kv[0]))
