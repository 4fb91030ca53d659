"""The results folder's contract: its format marker, a cell folder's lifecycle and its records.

``OUT/privauditor.json`` names the results format (a folder of another format is refused) and the run's
id. Each cell (or audit) lives in ``OUT/cells/<cell_id>/``: :class:`CellFolder` says whether it finished
(``DONE``), clears a half-written attempt, and finishes it by writing ``cell.json`` then ``DONE``, each
atomically, so a folder with ``DONE`` is whole and one without is redone. The last checkpoint's audit
is the folder's own files; an earlier one's lives under :func:`checkpoint_path`. ``cell.json`` is a
:class:`CellRecord`; its ``checkpoints`` are :class:`CheckpointRecord` s.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from .errors import PrivauditorError
from .files import write_json

# 2: the typed spec (data, weights and version identities in the cell id), split parts, views
# 3: checkpoints (one audit per snapshot; earlier ones under checkpoints/epoch-<e>/)
# 4: checkpoints named by step (checkpoints/step-<s>/; epochs may be fractions); tpr at FPR < target
RESULTS_FORMAT = 5  # 5: signal stores of format 2


class _CheckpointExtras(TypedDict, total=False):
    epsilon: float
    dp_violations: list[str]
    elsewhere: dict[str, Any]


class CheckpointRecord(_CheckpointExtras):
    """One audited checkpoint in ``cell.json``: its epoch and step (None for an audit, whose training is
    unknown), whether it had the lowest validation NLL of the cell (``best``), where its files are
    (relative to the cell folder), its utility (mean validation NLL), adaptation hash, the attacks run and
    the view files each read, and its extraction rates. A DP run adds the ε spent by then and the attacks whose empirical lower
    bound exceeds it; views computed out of the cell's process report under ``elsewhere``."""

    epoch: float | None
    step: int | None
    best: bool | None
    path: str
    utility_loss: float
    adaptation_hash: str
    attacks: list[str]
    views: dict[str, dict[str, str]]
    extraction: dict[
        str, Any
    ]  # extraction, PII and canary exposure at this checkpoint (tasks/leakage/extraction.py)


class _CellExtras(TypedDict, total=False):
    model: dict[str, Any]
    audit: dict[str, Any]
    defence: dict[str, Any]
    device: str
    repeats: dict[str, int]
    hardware: dict[str, Any]
    runtime: dict[str, Any]
    loss_receipts: (
        dict[str, Any] | None
    )  # the loss's coverage of each trained part (tasks/training/receipts.py)


class CellRecord(_CellExtras):
    """``cell.json``: what ran (``config``: the resolved spec), on what (``provenance``, ``model``), what
    it found at each checkpoint and what it cost. ``run_cell`` and ``run_audit`` both write one (an audit
    adds ``audit``: its files and model, and has no ``train`` beyond its seconds); the leaderboard and the
    board read them."""

    cell_id: str
    config: dict[str, Any]
    provenance: dict[str, Any]
    views: dict[str, dict[str, str]]
    checkpoints: list[CheckpointRecord]
    trainable_params: int
    total_params: int
    train: dict[str, Any]
    utility_loss: float
    n_members: int
    n_nonmembers: int
    timings: dict[str, float]
    versions: dict[str, str]


def checkpoint_record(  # noqa: PLR0913  # the record's fields, by keyword
    *,
    epoch: float | None,
    step: int | None,
    best: bool | None,
    path: str,
    utility_loss: float,
    adaptation_hash: str,
    attacks: list[str],
    views: dict[str, dict[str, str]],
    extraction: dict[str, Any],
    **extras: Any,
) -> CheckpointRecord:
    """One :class:`CheckpointRecord`, as the cell and the audit both write it (``extras``: a DP run's ε
    and violations, views computed elsewhere)."""
    record = CheckpointRecord(
        epoch=epoch, step=step, best=best, path=path, utility_loss=utility_loss,
        adaptation_hash=adaptation_hash, attacks=attacks, views=views, extraction=extraction,
    )  # fmt: skip
    return record | extras  # type: ignore[return-value]  # the extras are CheckpointRecord's optional keys


def cell_record(  # noqa: PLR0913  # the record's fields, by keyword
    *,
    cell_id: str,
    config: dict[str, Any],
    provenance: dict[str, Any],
    checkpoints: list[CheckpointRecord],
    trainable_params: int,
    total_params: int,
    train: dict[str, Any],
    n_members: int,
    n_nonmembers: int,
    timings: dict[str, float],
    **extras: Any,
) -> CellRecord:
    """``cell.json`` as the cell (:func:`~privauditor.tasks.cell.run.run_cell`) and the audit
    (:func:`~privauditor.tasks.audit.run.run_audit`) both write it: the last checkpoint's views and utility at
    the top, ``extras`` (``model``, ``audit``, ``defence``, ``device``, ``precision``, ``loss_receipts``,
    ``repeats``, ``versions``, ...) after the common fields."""
    last = checkpoints[-1]
    record = {
        "cell_id": cell_id, "config": config, "provenance": provenance, "views": last["views"],
        "checkpoints": checkpoints, "trainable_params": trainable_params, "total_params": total_params,
        "train": train, "utility_loss": last["utility_loss"], "n_members": n_members,
        "n_nonmembers": n_nonmembers, "timings": timings,
    }  # fmt: skip
    return record | extras  # type: ignore[return-value]  # the extras are CellRecord's optional keys


@dataclass
class CellOutcome:
    cell_id: str
    path: Path
    metrics: dict[str, Any]
    skipped: bool  # already DONE before this call
    warnings: tuple[str, ...] = ()  # what was weak about the inputs (an audit's; tasks/audit/inputs.py)


#: the folder of every cell (and audit) in a results folder
CELLS = "cells"


class ResultsFolder:
    """A results folder's layout, which this class alone knows: its marker, ``cells/<cell_id>/`` (each a
    :class:`CellFolder`), the finished cells among them. Everything else reads and writes a results folder
    through it (an object store's copy through :meth:`relative`, orchestrator/store/storage.py);
    ``tests/test_imports.py`` fails on a path to ``cells/`` built anywhere else."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def cells_dir(self) -> Path:
        return self.root / CELLS

    def cell(self, cell_id: str) -> CellFolder:
        return CellFolder(self.root, cell_id)

    def cell_ids(self, finished: bool = True) -> list[str]:
        """The ids of the cells (with ``finished``, those with ``DONE``), sorted."""
        if not self.cells_dir.is_dir():
            return []
        found = sorted(p.name for p in self.cells_dir.iterdir() if p.is_dir())
        return [c for c in found if self.cell(c).done] if finished else found

    def cells(self, finished: bool = True) -> list[CellFolder]:
        """:meth:`cell_ids` as folders."""
        return [self.cell(c) for c in self.cell_ids(finished)]

    @staticmethod
    def relative(cell_id: str, *parts: str) -> str:
        """A cell's file as a POSIX path relative to the results folder (an object store's key)."""
        return "/".join([CELLS, cell_id, *parts])


class CellFolder:
    """``OUT/cells/<cell_id>/`` through its lifecycle (:attr:`done`, :meth:`start`, :meth:`finish`) and
    what a finished one holds (:meth:`record`, :meth:`metrics`, :meth:`checkpoints`)."""

    def __init__(self, out: Path, cell_id: str) -> None:
        self.out, self.cell_id = Path(out), cell_id
        self.path = self.out / CELLS / cell_id

    @classmethod
    def at(cls, path: str | Path) -> CellFolder:
        """The cell folder ``path`` (``OUT/cells/<cell_id>``)."""
        path = Path(path)
        return cls(path.parent.parent, path.name)

    @property
    def done(self) -> bool:
        return (self.path / "DONE").exists()

    @property
    def has_record(self) -> bool:
        return (self.path / "cell.json").exists()

    def record(self) -> CellRecord:
        """Its ``cell.json``."""
        return json.loads((self.path / "cell.json").read_text())

    def metrics(self, checkpoint: str = ".") -> dict[str, Any]:
        """The ``metrics.json`` of a checkpoint's audit (``checkpoint``: its ``path`` in the record; the
        folder's own, the last checkpoint's, by default)."""
        return json.loads((self.path / checkpoint / "metrics.json").read_text())

    def checkpoints(self) -> list[tuple[CheckpointRecord, dict[str, Any]]]:
        """(checkpoint record, metrics by attack) pairs, in step order."""
        return checkpoint_results(self.path)

    def finished(self) -> str:
        """When it finished (``DONE``'s time; "" for a folder written before it was recorded)."""
        return json.loads((self.path / "DONE").read_text()).get("finished", "")

    def mark_interrupted(self) -> bool:
        """Leave ``INTERRUPTED`` in a cell stopped part-way (if its folder exists); whether it did."""
        if not self.path.is_dir():
            return False
        write_json(self.path / "INTERRUPTED", {"cell_id": self.cell_id})
        return True

    def outcome(self, skipped: bool, warnings: tuple[str, ...] = ()) -> CellOutcome:
        """The finished cell's outcome (its last checkpoint's metrics)."""
        metrics = json.loads((self.path / "metrics.json").read_text())
        return CellOutcome(self.cell_id, self.path, metrics, skipped, warnings)

    def start(self) -> Path:
        """Check the results folder (creating its marker), clear an unfinished earlier attempt and create
        the cell folder empty."""
        check_results_dir(self.out)
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        return self.path

    def finish(self, record: CellRecord) -> None:
        """Write ``cell.json``, then ``DONE`` (with the finishing time)."""
        write_json(self.path / "cell.json", record)
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json(self.path / "DONE", {"cell_id": self.cell_id, "finished": finished})


def _results_format(marker: Path) -> Any:
    try:
        return json.loads(marker.read_text()).get("results_format")
    except (json.JSONDecodeError, AttributeError):
        return "unreadable"


def check_results_format(folder: Path, name: str | None = None) -> None:
    """Refuse a folder whose ``privauditor.json`` names another results format (read, never written: a
    folder without one is left as it is); the error names it ``name`` (its URI, for a stage) or its path."""
    marker = folder / "privauditor.json"
    if marker.exists() and (found := _results_format(marker)) != RESULTS_FORMAT:
        raise PrivauditorError(
            f"{name or folder} holds results format {found!r}, this privauditor reads {RESULTS_FORMAT}: "
            "read it with the privauditor that wrote it"
        )


def check_results_dir(out: Path) -> None:
    """Create ``out/privauditor.json`` or check it: a folder of another results format is refused."""
    marker = out / "privauditor.json"
    if marker.exists():
        if (found := _results_format(marker)) != RESULTS_FORMAT:
            raise PrivauditorError(
                f"{out} holds results format {found!r}, this privauditor writes {RESULTS_FORMAT}: "
                "use another --out folder"
            )
        return
    if out.exists() and not out.is_dir():
        raise PrivauditorError(f"results folder {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        # run_id: this folder's identity on a board (a rerun elsewhere is another run)
        write_json(marker, {"results_format": RESULTS_FORMAT, "run_id": uuid.uuid4().hex})
    except OSError as exc:
        raise PrivauditorError(f"cannot write results to {out}: {exc.strerror or exc}") from None


def checkpoint_results(cell_dir: Path) -> list[tuple[CheckpointRecord, dict[str, Any]]]:
    """A finished cell's (checkpoint record, metrics by attack) pairs, in step order."""
    record = json.loads((Path(cell_dir) / "cell.json").read_text())
    return [
        (checkpoint, json.loads((Path(cell_dir) / checkpoint["path"] / "metrics.json").read_text()))
        for checkpoint in record["checkpoints"]
    ]


def checkpoint_path(step: int) -> str:
    """Where an earlier checkpoint's audit lives in its cell's folder (the last one's is the folder)."""
    return f"checkpoints/step-{step}"
