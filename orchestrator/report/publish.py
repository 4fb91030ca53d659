"""``privauditor publish DIR --to OUT``: the public face of a results folder.

What goes out: the leaderboard (``leaderboard.parquet/.csv/.md/.html``: per (cell, attack) aggregates,
the contract columns), ``plots/`` (the cells' ROC images), ``provenance.json`` (per cell: resolved
settings, package versions, split and adaptation hashes, training figures, timings), ``eval_results/`` and
``every_eval_ever/`` (each cell's last-checkpoint aggregates as Hugging Face Hub evaluation results, with
a model-card section to paste, and as Every Eval Ever records, both formats always:
:mod:`~privauditor.orchestrator.report.export_files`; ``privauditor board export`` writes the same files
for a board, one format or both) and ``published.json``. The same results give the same bytes (no time of
publishing is written). What never goes out: sample text, sample ids, token ids, per-sample signals or
scores, neighbour texts, split id lists, adapter weights, W&B run files. The folder is built beside the
target and renamed into place (:func:`privauditor.tasks.infra.files.replace_folder`), so nobody reads half of it;
a target that is not an earlier publish folder is refused, not overwritten. ``--wandb-project`` also logs the leaderboard as a W&B table (mode
from ``WANDB_MODE``, else online).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.files import replace_folder, write_json
from privauditor.tasks.infra.results import Results

from .row_schema import Row

#: the parts of a cell's ``cell.json`` that are published (``runtime`` names machines; it stays home)
PROVENANCE_KEYS = (
    "cell_id", "config", "model", "provenance", "trainable_params", "train", "defence", "utility_loss",
    "device", "hardware", "n_members", "n_nonmembers", "timings", "versions",
)  # fmt: skip
MARKER = "published.json"


def publish(results: Path, to: Path, wandb_project: str | None = None) -> list[Row]:
    """Write the public export of ``results`` to ``to``; returns the leaderboard rows."""
    results, to = Path(results).resolve(), Path(to).resolve()
    Results.at(results).check_readable()  # not a results folder, or one of another format: refused, not read
    if to == results or to in results.parents:
        raise PrivauditorError(f"--to {to} would replace the results folder itself: choose another folder")
    if to.exists() and not (to / MARKER).is_file():
        raise PrivauditorError(f"--to {to} exists and is not an earlier publish folder: not overwriting it")
    if results in to.parents and to.parent != results:
        raise PrivauditorError(
            f"--to {to} is inside the results folder's {to.relative_to(results).parts[0]}/: choose a folder "
            "outside the results folder, or directly in it (the default: DIR/public)"
        )
    if wandb_project is not None:
        from privauditor.orchestrator.sweepfile.sweep import check_project

        check_project(wandb_project, "--wandb-project")
    from .leaderboard import rows

    found = rows(results)
    replace_folder(to, lambda tmp: _write(results, tmp, found))
    if wandb_project:
        from privauditor.orchestrator.sweepfile.sweep import WandbSettings
        from privauditor.orchestrator.tracking import log_leaderboard

        mode = os.environ.get("WANDB_MODE") or "online"
        log_leaderboard(WandbSettings(mode=mode, project=wandb_project), results.name, to, found)
    return found


def _write(results: Path, tmp: Path, found: list[Row]) -> None:
    """Every published file of ``results``' leaderboard rows ``found`` into the empty folder ``tmp``."""
    from . import export_files
    from .exports import finished_times
    from .leaderboard import write
    from .row_schema import trained_rows

    (tmp / "plots").mkdir()
    cells = sorted({r["cell_id"] for r in found})
    for cell_id in cells:
        png = Results(results).roc_image(cell_id)
        if png.is_file():
            shutil.copyfile(png, tmp / "plots" / png.name)
    write(tmp, found)
    trained = trained_rows(found)  # the models as trained; the shipped forms are in the leaderboard's rows
    export_files.write(tmp, trained, finished_times(results, cells))  # Hub and Every Eval Ever files, both
    provenance = {}
    for cell_id in cells:
        record = Results(results).cell(cell_id).record()
        provenance[cell_id] = {k: v for k, v in record.items() if k in PROVENANCE_KEYS}  # sorted when written
    write_json(tmp / "provenance.json", {"cells": provenance})
    write_json(tmp / MARKER, {"results": results.name, "cells": len(cells), "rows": len(found)})
