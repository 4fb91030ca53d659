"""Merging records of many runs into the board's two tables.

- **Cell rows** (the leaderboard's own columns, :func:`privauditor.orchestrator.report.row_schema.columns`, and
  ``replicas_agree``): one per (cell, checkpoint step, attack). Records of one cell id from several runs
  are *replicas* of the same settings and seed, not extra samples; ``runs`` counts them. Their point
  figures (AUC, TPRs, utility, timings) are averaged by :func:`mean_row`; every interval and bound
  derived from the per-sample scores (:data:`PER_SAMPLE_BOUNDS`: CI bounds, FPR bounds, ``few`` flags,
  the ε bound, its ceiling and the DP-violation flag) is never averaged: it is the replica's of the run
  id that sorts first. ``replicas_agree`` is False where the replicas' AUCs differ (non-deterministic
  code, or a changed environment): then the shown AUC is their mean and the intervals are one run's.
- **Setting rows** (:func:`~privauditor.orchestrator.report.row_schema.setting_columns`): one per (setting, checkpoint step, attack), over the seeds
  of a setting (cells whose specs differ only in the seed). ``auc`` is the mean over seeds; with two
  seeds or more ``auc_ci_low/high`` is the t-interval of that mean (``ci_over`` = ``seeds``), with one it
  is the cell's own bootstrap CI over samples (``ci_over`` = ``samples``): recomputed, never averaged.

Missing values are never dropped silently: a missing ε bound (``eps_lower`` None, "nothing bounded") is
the trivial bound 0 in a mean (``None`` stays where no merged row has a bound), and ``eps_bounded`` says
how many of the merged rows had one ("bounded in 1 of 3 seeds"); any other number that is missing in
some merged rows (e.g. a TPR left out for too few non-members) makes the merged value ``None``.

Superseded records (named in a later record's ``supersedes``) are left out of both; so is a schema-1
record whose schema-2 twin (same run, cell and step: the folder added again) is in the store.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from privauditor.orchestrator.report.summary import technique

from ..report.row_schema import TPR_COLUMNS, setting_columns
from .records import rows_of

#: figures computed from the per-sample scores as intervals or bounds: one replica's, never a mean
PER_SAMPLE_BOUNDS = (
    "auc_ci_low", "auc_ci_high", *(f for f in TPR_COLUMNS if f != "tpr_at_0fp"), "eps_lower", "eps_ceiling",
    "dp_violation",
)  # fmt: skip
#: in a mean, a missing value of these is this number (``eps_lower`` None: the trivial bound ε ≥ 0)
MISSING_AS = {"eps_lower": 0.0}


def live(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records no other record supersedes, one per (run, cell, step): the newest schema's."""
    gone = {key for r in records for key in r["supersedes"]}
    newest: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if r["key"] in gone:
            continue
        place = (r["run"], r["cell_id"], r["step"])
        if place not in newest or r["schema_version"] > newest[place]["schema_version"]:
            newest[place] = r
    return [r for r in records if newest.get((r["run"], r["cell_id"], r["step"])) is r]


def mean_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Field by field: the common value; else, where a value is missing, its :data:`MISSING_AS` number or
    ``None`` (nothing is dropped); else the mean of numbers, ``any`` of flags, the first string."""
    merged = {}
    for column in rows[0]:
        values = [r.get(column) for r in rows]
        if column in MISSING_AS and any(v is not None for v in values):  # all missing: still None
            values = [MISSING_AS[column] if v is None else v for v in values]
        if all(v == values[0] for v in values):
            merged[column] = values[0]
        elif any(v is None for v in values):
            merged[column] = None
        elif all(isinstance(v, bool) for v in values):
            merged[column] = any(values)
        elif all(isinstance(v, int | float) for v in values):
            merged[column] = sum(values) / len(values)
        else:
            merged[column] = values[0]
    return merged


def _step(row: dict[str, Any]) -> int:
    return -1 if row["step"] is None else row["step"]


def replica_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell row from its replicas, given in the order of their runs' ids (see the module docstring)."""
    first = rows[0]
    merged = mean_row(rows) | {k: first[k] for k in PER_SAMPLE_BOUNDS if k in first}
    return merged | {"runs": len(rows), "replicas_agree": len({r["auc"] for r in rows}) == 1}


def cell_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leaderboard rows of the live records, replicas merged, sorted by cell, step and attack."""
    replicas: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for record in sorted(live(records), key=lambda r: r["run"]):
        for row in rows_of(record):
            replicas[(row["cell_id"], _step(row), row["attack"])].append(row)
    return [replica_row(rows) for _, rows in sorted(replicas.items())]


def _interval(aucs: list[float], row: dict[str, Any]) -> dict[str, Any]:
    """The mean AUC's spread and interval: over seeds (t) with two or more, else the cell's own."""
    from scipy import stats

    n = len(aucs)
    mean = sum(aucs) / n
    if n == 1:
        return {"auc": mean, "auc_std": None, "ci_over": "samples",
                "auc_ci_low": row["auc_ci_low"], "auc_ci_high": row["auc_ci_high"]}  # fmt: skip
    std = math.sqrt(sum((a - mean) ** 2 for a in aucs) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    return {"auc": mean, "auc_std": std, "ci_over": "seeds",
            "auc_ci_low": max(0.0, mean - half), "auc_ci_high": min(1.0, mean + half)}  # fmt: skip


def setting_rows(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (setting, checkpoint step, attack) over its seeds, highest AUC first in a setting."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    last: dict[str, int] = {}
    for row in cells:
        groups[(row["setting"], _step(row), row["attack"])].append(row)
        if row["step"] is not None:
            last[row["setting"]] = max(last.get(row["setting"], row["step"]), row["step"])
    found, names = [], setting_columns()
    for (setting, step, _), rows in groups.items():
        merged = mean_row(rows) | _interval([r["auc"] for r in rows], rows[0])
        merged |= {
            "technique": technique(rows[0]), "last": step == -1 or step == last.get(setting),
            "n_seeds": len(rows), "seeds": ",".join(str(s) for s in sorted(r["seed"] for r in rows)),
            "runs": sum(r["runs"] for r in rows), "eps_bounded": sum(r["eps_lower"] is not None for r in rows),
            "replicas_agree": all(r.get("replicas_agree", True) for r in rows),
            "cells": " ".join(sorted(r["cell_id"] for r in rows)),
        }  # fmt: skip
        found.append({c: merged.get(c) for c in names})
    return sorted(found, key=lambda r: (r["model"], r["dataset"], r["technique"], r["step"] or 0, -r["auc"]))
