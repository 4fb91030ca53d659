"""The leaderboard: one row per (cell, checkpoint, attack) from the finished cells on disk.

:func:`build` reads every ``cells/*/`` with ``DONE`` (its ``cell.json`` and each checkpoint's
``metrics.json``) and writes ``leaderboard.parquet``, ``.csv``, ``.md`` and ``.html`` atomically; it is
what ``privauditor report DIR`` runs and what a sweep calls as cells finish. Columns: the design's
contract (``cell_id, model, adaptation, dataset, seed, attack, auc, auc_ci_low, auc_ci_high,
tpr_at_0.1pct_fpr, tpr_at_1pct_fpr, n_members, n_nonmembers, utility_loss, trainable_params,
train_seconds``) and the checkpoint's ``epoch``, ``step`` and ``best`` (lowest validation NLL of its
cell; null for an audit, whose training is not known). ``utility_loss`` is the checkpoint's own.

Defences: ``defence`` (``none``, ``dp``), ``epsilon`` (the ε a DP checkpoint has spent; null without DP),
``epsilon_target`` (the cell's), ``delta``, and the attack's empirical lower bound on ε at that δ,
``eps_lower`` (null: nothing bounded), with ``eps_ceiling``, the most its sample size could show
(:mod:`privauditor.tasks.lower_bound`); ``dp_violation`` is true where the bound exceeds the spent ε: a
bug in DP training or accounting. ``auc_repeated_vs_singleton``: with duplication, how the score ranks
members trained several times above those trained once.

Board: ``setting`` hashes the cell's resolved spec without its seed (cells of one setting differ only in
seed), and ``runs`` is how many runs' records a row averages (1 in a results folder; a board's cell rows,
:mod:`privauditor.orchestrator.board.merge`, have the same columns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from privauditor.tasks.cell import checkpoint_results
from privauditor.tasks.faults import point
from privauditor.tasks.files import atomic_write
from privauditor.tasks.spec import CellSpec, setting_of

from .formats import fraction_text, markdown_table, tpr_text
from .summary import SUMMARY_HEADER, summary

#: per low-FPR rate (tasks/metrics.py): its Clopper-Pearson interval, the 95 % upper bound on the true FPR of
#: its threshold, and whether fewer than 10 false positives were expected (``few``); the TPR at 0 false
#: positives, which is how a 0.1 % rate is shown below 10,000 non-members
TPR_COLUMNS = [
    f"{rate}{part}"
    for rate in ("tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_0fp")
    for part in ("_ci_low", "_ci_high", "_fpr_bound", *(() if rate == "tpr_at_0fp" else ("_few",)))
] + ["tpr_at_0fp"]

COLUMNS = [
    "cell_id",
    "model",
    "adaptation",
    "dataset",
    "seed",
    "epoch",
    "step",
    "best",
    "attack",
    "access",
    "auc",
    "auc_ci_low",
    "auc_ci_high",
    "tpr_at_0.1pct_fpr",
    "tpr_at_1pct_fpr",
    *TPR_COLUMNS,
    "n_members",
    "n_nonmembers",
    "utility_loss",
    "trainable_params",
    "trainable_fraction",
    "train_seconds",
    "defence",
    "epsilon",
    "epsilon_target",
    "delta",
    "eps_lower",
    "eps_ceiling",
    "dp_violation",
    "auc_repeated_vs_singleton",
    "setting",
    "runs",
]


def rows(out: Path) -> list[dict[str, Any]]:
    """One dict per (finished cell, checkpoint, attack), sorted by cell id, epoch, attack."""
    found = []
    for cell_dir in sorted((Path(out) / "cells").glob("*/")):
        if not (cell_dir / "DONE").exists():
            continue
        record = json.loads((cell_dir / "cell.json").read_text())
        spec = CellSpec.from_dict(record["config"])
        for checkpoint, metrics in checkpoint_results(cell_dir):
            for attack in sorted(metrics):
                if "auc" in metrics[attack]:
                    found.append(_row(record, spec, checkpoint, attack, metrics[attack]))
    return found


def _row(
    record: dict[str, Any], spec: CellSpec, checkpoint: dict[str, Any], attack: str, m: dict[str, Any]
) -> dict[str, Any]:
    return {
        "cell_id": record["cell_id"],
        "model": spec.model,
        "adaptation": spec.adaptation,
        "dataset": spec.dataset,
        "seed": spec.seed,
        "epoch": checkpoint["epoch"],
        "step": checkpoint["step"],
        "best": checkpoint["best"],
        "attack": attack,
        "access": access_of(attack),
        "auc": m["auc"],
        "auc_ci_low": m["auc_ci"][0],
        "auc_ci_high": m["auc_ci"][1],
        "tpr_at_0.1pct_fpr": m["tpr_at_0.1pct_fpr"],
        "tpr_at_1pct_fpr": m["tpr_at_1pct_fpr"],
        **tpr_fields(m),
        "n_members": m["n_members"],
        "n_nonmembers": m["n_nonmembers"],
        "utility_loss": checkpoint["utility_loss"],
        "trainable_params": record["trainable_params"],
        "trainable_fraction": trainable_fraction(record),
        "train_seconds": record["train"]["seconds"],
        "defence": spec.defence,
        "epsilon": checkpoint.get("epsilon"),
        "epsilon_target": spec.defence_params.get("epsilon"),
        "delta": m.get("eps_delta", spec.defence_params.get("delta")),
        "eps_lower": m.get("eps_lower"),
        "eps_ceiling": m.get("eps_ceiling"),
        "dp_violation": attack in checkpoint.get("dp_violations", []),
        "auc_repeated_vs_singleton": m.get("auc_repeated_vs_singleton"),
        "setting": setting_of(record["config"]),
        "runs": 1,
    }


def tpr_fields(metrics: dict[str, Any]) -> dict[str, Any]:
    """The :data:`TPR_COLUMNS` of one attack's metrics (None where a results folder predates them)."""
    found = {}
    for rate in ("tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_0fp"):
        low, high = metrics.get(f"{rate}_ci") or (None, None)
        found |= {f"{rate}_ci_low": low, f"{rate}_ci_high": high,
                  f"{rate}_fpr_bound": metrics.get(f"{rate}_fpr_bound")}  # fmt: skip
        if rate != "tpr_at_0fp":
            found[f"{rate}_few"] = metrics.get(f"{rate}_few")
    return found | {"tpr_at_0fp": metrics.get("tpr_at_0fp")}


def trainable_fraction(record: dict[str, Any]) -> float | None:
    """Trainable parameters over all of the adapted model's (peft's convention), None where unknown."""
    total = record.get("total_params")
    return record["trainable_params"] / total if total else None


def access_of(attack: str) -> str:
    """The threat model of an attack (``?`` for one whose plugin is not installed here)."""
    from privauditor.tasks.attacks import ATTACKS

    return ATTACKS.get(attack).access if attack in ATTACKS else "?"


def _atomic(path: Path, write) -> None:
    def written(tmp: Path) -> None:
        write(tmp)
        point("leaderboard")  # crash tests stop here (only when $PRIVAUDITOR_FAULT asks)

    atomic_write(path, written)


def build(out: Path) -> list[dict[str, Any]]:
    """Rebuild every leaderboard file under ``out`` from the finished cells; returns the rows."""
    found = rows(Path(out))
    write(Path(out), found)
    return found


def write(out: Path, found: list[dict[str, Any]]) -> None:
    """``leaderboard.parquet/.csv/.md/.html`` of the rows ``found`` under ``out`` (ROC images from
    ``out/plots/``), each file written atomically."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(found, schema=_schema()) if found else _schema().empty_table()
    _atomic(out / "leaderboard.parquet", lambda p: pq.write_table(table, p))
    _atomic(out / "leaderboard.csv", lambda p: pacsv.write_csv(table, p))
    header = ["model", "adaptation", "dataset", "seed", "epoch", "best", "attack", "access", "AUC", "95% CI",
              "TPR@1%FPR [95% CI]", "TPR at 0 FP of N", "trainable", "val NLL"]  # fmt: skip
    body = [
        [
            r["model"],
            r["adaptation"],
            r["dataset"],
            r["seed"],
            "-" if r["epoch"] is None else r["epoch"],
            "-" if r["best"] is None else r["best"],
            r["attack"],
            r["access"],
            f"{r['auc']:.3f}",
            f"[{r['auc_ci_low']:.3f}, {r['auc_ci_high']:.3f}]",
            tpr_text(r, "tpr_at_1pct_fpr"),
            tpr_text(r, "tpr_at_0fp"),
            fraction_text(r["trainable_fraction"]),
            f"{r['utility_loss']:.3f}",
        ]
        for r in sorted(found, key=lambda r: -r["auc"])
    ]
    markdown = [
        "# Leaderboard",
        "",
        "Mean ± std AUC per adaptation at each cell's last checkpoint (across models, datasets, seeds and "
        "attacks; `findings.md` compares techniques at equal epochs, best validation and matched utility):",
        "",
        markdown_table(["adaptation", *SUMMARY_HEADER], summary(found, "adaptation")),
        "",
        "Mean ± std AUC per attack:",
        "",
        markdown_table(["attack", *SUMMARY_HEADER], summary(found, "attack")),
        "",
        "Every (cell, checkpoint, attack), highest AUC first:",
        "",
        markdown_table(header, body),
        "",
    ]
    _atomic(out / "leaderboard.md", lambda p: p.write_text("\n".join(markdown)))
    write_html(out, found)


def write_html(out: Path, found: list[dict[str, Any]]) -> None:
    """``leaderboard.html`` (ROC and privacy–utility images from ``out/plots/``), atomically."""
    from .html import leaderboard_html

    _atomic(out / "leaderboard.html", lambda p: p.write_text(leaderboard_html(out, found)))


def _schema():
    import pyarrow as pa

    types = {
        "seed": pa.int64(),
        "step": pa.int64(),  # epoch: float64, a checkpoint may fall inside an epoch
        "best": pa.bool_(),
        "dp_violation": pa.bool_(),
        "n_members": pa.int64(),
        "n_nonmembers": pa.int64(),
        "trainable_params": pa.int64(),
        **{c: pa.bool_() for c in TPR_COLUMNS if c.endswith("_few")},
    }
    types["runs"] = pa.int64()
    strings = {"cell_id", "model", "adaptation", "dataset", "attack", "access", "defence", "setting"}
    return pa.schema([(c, pa.string() if c in strings else types.get(c, pa.float64())) for c in COLUMNS])
