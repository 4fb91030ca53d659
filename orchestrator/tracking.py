"""Weights & Biases mirroring: one run per finished cell, and the leaderboard as a table per sweep.

Offline by default (no API key needed; runs land in ``OUT/wandb/`` for a later ``wandb sync``),
``online`` when the sweep's ``tracking.wandb.mode`` says so, and a no-op when the mode is ``disabled``, the
environment sets ``WANDB_MODE=disabled`` or wandb is not installed. Only settings and aggregate metrics
are logged, never sample text: no signals, no scores, no neighbours.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _wandb(settings: Any):
    mode = os.environ.get("WANDB_MODE") or settings.mode
    if mode == "disabled":
        return None, mode
    try:
        import wandb
    except ImportError:
        log.info("wandb is not installed: tracking is off")
        return None, mode
    return wandb, mode


def log_cell(
    settings: Any,
    sweep_name: str,
    out: Path,
    record: dict[str, Any],
    audited: list[tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """One W&B run for a finished cell: its resolved config, one history step per checkpoint (epoch,
    validation NLL, each attack's AUC) and, as the summary, the last checkpoint's per-attack metrics (no
    ROC points)."""
    wandb, mode = _wandb(settings)
    if wandb is None:
        return
    metrics = audited[-1][1]
    summary = {
        f"{attack}/{key}": value
        for attack, m in metrics.items()
        for key, value in m.items()
        if key not in ("roc", "auc_ci") and not isinstance(value, str)
    }
    summary |= {f"{a}/auc_ci_low": m["auc_ci"][0] for a, m in metrics.items() if "auc_ci" in m}
    summary |= {"utility_loss": record["utility_loss"], "trainable_params": record["trainable_params"]}
    run = wandb.init(
        project=settings.project,
        entity=settings.entity,
        group=sweep_name,
        name=record["cell_id"],
        config=record["config"],
        mode=mode,
        dir=str(out),
        reinit="finish_previous",
        settings=wandb.Settings(silent=True),  # the sweep's console is privauditor's progress
    )
    run.define_metric("*", step_metric="epoch")  # charts against epoch, not W&B's own step
    for checkpoint, found in audited:
        history = checkpoint_report(checkpoint, found)
        run.log({k: v for k, v in history.items() if v is not None and k != "best"})
    run.summary.update(summary)
    run.finish()


def checkpoint_report(checkpoint: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """What a trial reports (and a W&B run logs) for one checkpoint: epoch, step, utility, each attack's
    AUC and the highest, and for a DP run the ε spent."""
    aucs = {f"{attack}/auc": m["auc"] for attack, m in metrics.items() if "auc" in m}
    return {
        "epoch": checkpoint["epoch"],
        "step": checkpoint["step"],
        "best": checkpoint["best"],
        "utility_loss": checkpoint["utility_loss"],
        "max_auc": max(aucs.values()) if aucs else float("nan"),
        **aucs,
    } | ({"epsilon": checkpoint["epsilon"]} if "epsilon" in checkpoint else {})


def log_leaderboard(settings: Any, sweep_name: str, out: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """The sweep's leaderboard as one W&B table (a run named ``<sweep>-leaderboard``)."""
    wandb, mode = _wandb(settings)
    if wandb is None or not rows:
        return
    columns = list(rows[0])
    run = wandb.init(
        project=settings.project,
        entity=settings.entity,
        group=sweep_name,
        name=f"{sweep_name}-leaderboard",
        job_type="leaderboard",
        mode=mode,
        dir=str(out),
        reinit="finish_previous",
        settings=wandb.Settings(silent=True),  # the sweep's console is privauditor's progress
    )
    run.log({"leaderboard": wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])})
    run.finish()
