"""``privauditor board export STORE --format F --to FOLDER --date DATE``: the board's cells in the public
formats ``privauditor publish`` writes for one results folder (Hugging Face Hub evaluation results with a
model-card section, Every Eval Ever records), by the same writers
(:mod:`privauditor.orchestrator.report.export_files`; what each file holds:
:mod:`privauditor.orchestrator.report.exports`).

**What the numbers are.** The board's cell rows (:func:`.merge.cell_rows` of the store's valid records,
:func:`.merge.live` ones only: superseded records are left out), each cell at its last checkpoint (its
highest epoch), per attack. A cell id run by several runs (replicas: the same settings and seed, run
again) gives one row whose AUC and TPRs are the **mean** over its replicas, while its intervals and
bounds (the AUC's 95 % bootstrap interval, each TPR's Clopper-Pearson interval and FPR bound) are **one
replica's**, of the run id that sorts first, never averaged (:mod:`.merge`): the files then say how many
replicas the numbers are the mean of and whether their AUCs agree (where they differ the mean may lie
outside that one run's interval). Seeds are not merged: each seed is its own cell, its own adapted model,
its own files; the board's means over seeds (setting rows) belong to no one model and are not exported.
Audits never enter a board, so every record exported is a benchmark cell (``first_party``).

**Time.** A board record holds no time (the same results give the same bytes, whenever they are added),
so the time the formats want (the Hub entries' ``date``, Every Eval Ever's ``evaluation_timestamp`` and
``retrieved_timestamp``) is ``--date`` (default: the day of the export, UTC), the same for every cell: the same store and date give the same
bytes.

**Folder.** ``FOLDER`` holds ``eval_results/`` and/or ``every_eval_ever/`` (as publish lays them out) and
:data:`MARKER` (formats, date, counts; no path). It is built beside ``FOLDER`` and renamed into place, so
a failure leaves nothing half-written; an existing ``FOLDER`` is replaced only when it is an earlier board
export, and never when it lies inside the store or holds it. Bad input is a one-line error.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from privauditor.orchestrator.report import export_files
from privauditor.orchestrator.report.exports import TIME_FORMAT
from privauditor.orchestrator.report.row_schema import TRAINED, shipped_form
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.files import replace_folder, write_json

from .check import valid_records
from .merge import cell_rows, live
from .store import Store

MARKER = "board-export.json"
#: what ``--date`` may be: a day (midnight UTC) or a UTC time
DATE_FORMATS = ("%Y-%m-%d", TIME_FORMAT)


def export(location: str | Path, names: Iterable[str], to: str | Path, date: str) -> dict[str, Any]:
    """Write the store's cells in the formats ``names`` to ``to``, dated ``date``; returns what
    :data:`MARKER` says (formats, date, cells, records)."""
    chosen, stamp = export_files.formats(names), utc_time(date)
    store, to = Store(location), Path(to).resolve()
    check_target(store, to)
    records = [r for r in live(valid_records(store)) if shipped_form(r) == TRAINED]
    rows = cell_rows(records)  # the models as trained: an eval result names a model, not its shipped form
    if not rows:
        raise PrivauditorError(f"store {store.uri} holds no records to export: `privauditor board add` first")
    cells = sorted({r["cell_id"] for r in rows})
    summary = {"formats": list(chosen), "date": stamp, "cells": len(cells), "records": len(records)}

    def build(tmp: Path) -> None:
        export_files.write(tmp, rows, dict.fromkeys(cells, stamp), chosen)
        write_json(tmp / MARKER, summary)

    replace_folder(to, build)
    return summary


def utc_time(date: str) -> str:
    """``--date`` as ``YYYY-MM-DDTHH:MM:SSZ``: a day is its midnight (UTC)."""
    for pattern in DATE_FORMATS:
        try:
            return time.strftime(TIME_FORMAT, time.strptime(date, pattern))
        except ValueError:
            continue
    raise PrivauditorError(
        f"--date {date!r} is neither a day (2026-12-01) nor a UTC time (2026-12-01T12:00:00Z)"
    )


def check_target(store: Store, to: Path) -> None:
    """Refuse a ``--to`` that overlaps a local store, or that exists and is not an earlier board export."""
    if store.local is not None and (
        to == store.local or store.local in to.parents or to in store.local.parents
    ):
        raise PrivauditorError(f"--to {to} overlaps the store {store.uri}: choose a folder outside it")
    if to.exists() and not (to / MARKER).is_file():
        raise PrivauditorError(f"--to {to} exists and is not an earlier board export: not overwriting it")
