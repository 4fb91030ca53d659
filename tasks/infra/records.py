"""A results folder's records: ``cell.json`` (:class:`CellRecord`) and its audited checkpoints
(:class:`CheckpointRecord`), built by one pair of functions that the cell and the audit both call, and a
finished cell's outcome as :func:`~privauditor.tasks.cell.run.run_cell` returns it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict


class _CheckpointExtras(TypedDict, total=False):
    epsilon: float
    dp_violations: list[str]
    elsewhere: dict[str, Any]
    shipped: str  # the shipped form audited (tasks/shipping); absent: the model as trained
    ship: dict[str, Any]  # what shipping it did (quantised tensors, the file's bytes, ...)


class CheckpointRecord(_CheckpointExtras):
    """One audited checkpoint in ``cell.json``: its epoch and step (None for an audit, whose training is
    unknown), whether it had the lowest validation NLL of the cell (``best``), where its files are
    (relative to the cell folder), its utility (mean validation NLL), adaptation hash, the attacks run and
    the view files each read, and its extraction rates. A DP run adds the ε spent by then and the attacks whose empirical lower
    bound exceeds it; views computed out of the cell's process report under ``elsewhere``; a shipped form of
    the last checkpoint (``cell.json``'s ``shipped``) names its form under ``shipped``."""

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
    #: the shipped forms of the last checkpoint (``score.shipped``): each a checkpoint record with its
    #: ``shipped`` form, or ``{"shipped": form, "skipped": why}``
    shipped: list[dict[str, Any]]
    loss_receipts: (
        dict[str, Any] | None
    )  # the loss's coverage of each trained part (tasks/training/receipts.py)
    resumed_from_step: int | None  # the step training resumed from after a preemption (None: it did not)
    preemptions: int  # drain notices the cell's training stopped at and resumed from


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
