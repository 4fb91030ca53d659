"""The one row schema: every leaderboard column, where its value comes from and where else it goes.

:data:`ROW` lists the columns in order. From it come the leaderboard's columns and parquet schema
(:func:`columns`, :func:`arrow_schema`), a finished cell's rows (:func:`row`), the board record's fields
(:func:`record_fields`: ``level`` ``cell`` at the record's top level, ``attack`` under each attack) by
schema version (``since``), and the board's setting columns (:func:`setting_columns`, where ``setting``).
Adding a column is one :class:`Column` appended to :data:`ROW`: it reaches the leaderboard files, the
board's records (raise ``SCHEMA_VERSION`` in ``board/records.py`` and set ``since`` to it, so records of
the earlier version still read: they lack it) and its setting rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from privauditor.tasks.infra.records import CellRecord, CheckpointRecord
from privauditor.tasks.spec.resolved import CellSpec, setting_of

KINDS = ("string", "int", "float", "bool")


@dataclass(frozen=True)
class Source:
    """What a row is read from: a finished cell's ``cell.json`` record and resolved spec, one checkpoint's
    record, and one attack's name and metrics there."""

    record: CellRecord
    spec: CellSpec
    checkpoint: CheckpointRecord
    attack: str
    metrics: dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column. ``kind``: its parquet type (:data:`KINDS`). ``level``: ``cell`` (one value per cell and
    checkpoint: a board record's field), ``attack`` (per attack: in the record's ``attacks``) or ``board``
    (the board's own, e.g. how many runs a row merges). ``value``: read from a :class:`Source` (a board
    column's is its value in a results folder). ``setting``: shown in the board's setting rows (seeds
    merged: the common value, else the mean). ``since``: the board-record schema version that added it."""

    name: str
    value: Callable[[Source], Any]
    kind: str = "float"
    level: str = "cell"
    setting: bool = True
    since: int = 1
    #: its value in a board record of a version before ``since`` (one that predates the column)
    missing: Any = None


def access_of(attack: str) -> str:
    """The threat model of an attack (``?`` for one whose plugin is not installed here)."""
    from privauditor.tasks.attacks import ATTACKS

    return ATTACKS.get(attack).access if attack in ATTACKS else "?"


def trainable_fraction(record: CellRecord) -> float | None:
    """Trainable parameters over all of the adapted model's (peft's convention), None where unknown."""
    total = record.get("total_params")
    return record["trainable_params"] / total if total else None


#: how a value is read from one attack's metrics
MetricsReader = Callable[[dict[str, Any]], Any]


def _metric(key: str) -> MetricsReader:
    """Reads ``key`` of an attack's metrics (None where they lack it)."""
    return lambda metrics: metrics.get(key)


def _interval_end(key: str, index: int) -> MetricsReader:
    """Reads one end (``index`` 0 or 1) of the interval ``key`` of an attack's metrics (None without it)."""
    return lambda metrics: (metrics.get(key) or (None, None))[index]


def _of_metrics(read: MetricsReader) -> Callable[[Source], Any]:
    """A column's value read from its source's metrics alone."""
    return lambda s: read(s.metrics)


def _tpr_readers() -> dict[str, MetricsReader]:
    """Per low-FPR rate (tasks/stats/metrics.py): its Clopper-Pearson interval, the 95 % upper bound on the true
    FPR of its threshold, and whether fewer than 10 false positives were expected (``few``); then the TPR
    at 0 false positives, which is how a 0.1 % rate is shown below 10,000 non-members. Each is read from
    the attack's metrics alone, so an audit's report reads them too (:func:`tpr_fields`)."""
    found: dict[str, MetricsReader] = {}
    for rate in ("tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_0fp"):
        for end, index in (("_ci_low", 0), ("_ci_high", 1)):
            found[rate + end] = _interval_end(f"{rate}_ci", index)
        found[f"{rate}_fpr_bound"] = _metric(f"{rate}_fpr_bound")
        if rate != "tpr_at_0fp":
            found[f"{rate}_few"] = _metric(f"{rate}_few")
    found["tpr_at_0fp"] = _metric("tpr_at_0fp")
    return found


_TPR_READERS = _tpr_readers()


def _tpr_columns() -> list[Column]:
    """The low-FPR columns (:func:`_tpr_readers`): per attack, board records of schema 2 and later."""
    return [
        Column(
            name,
            _of_metrics(read),
            "bool" if name.endswith("_few") else "float",
            level="attack",
            setting=False,
            since=2,
        )  # fmt: skip
        for name, read in _TPR_READERS.items()
    ]


def _extraction_columns() -> list[Column]:
    """Per kind of discoverable extraction (``greedy``, ``sampled``: tasks/leakage/extraction.py) and for the PII
    fields' reconstruction (``pii_reconstructed``, every declared kind together: tasks/leakage/pii.py), the
    members' and the non-members' rates and their difference with its interval, from the checkpoint's
    ``extraction`` (None in results that predate it, and in the rows of every attack alike: a cell-level
    figure)."""
    found = []
    for name, where, key, since in (("extraction_greedy", (), "greedy", 3), ("extraction_sampled", (), "sampled", 3),
                                    ("pii_reconstructed", ("pii", "all"), "reconstructed", 3),
                                    ("pii_inferred", ("pii_inference", "all"), "inferred", 4)):  # fmt: skip
        for field in ("members", "nonmembers", "difference"):
            found.append(Column(f"{name}_{field}", _extraction((*where, f"{key}_{field}")), since=since))
        for end, index in (("_ci_low", 0), ("_ci_high", 1)):
            found.append(Column(f"{name}_difference{end}", _extraction((*where, f"{key}_difference_ci"), index),
                                setting=False, since=since))  # fmt: skip
    return found


def _extraction(path: tuple[str, ...], index: int | None = None) -> Callable[[Source], Any]:
    """Reads the checkpoint's ``extraction`` at ``path`` (an interval: its end ``index``), None where a
    level is missing."""

    def read(s: Source) -> Any:
        value: Any = s.checkpoint.get("extraction") or {}
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value if index is None or value is None else value[index]

    return read


def _exposure(s: Source, which: str) -> Any:
    """From the checkpoint's canary exposures (tasks/leakage/canaries.py; None without canaries): ``repeats``, the
    largest number of times a canary was trained; ``top``, the included canaries' mean exposure (bits) at
    that number; ``once``, at 1."""
    found = (s.checkpoint.get("extraction") or {}).get("exposure")
    if not found:
        return None
    means = {int(k): v["mean"] for k, v in found["mean_by_repeats"].items() if not k.endswith("_left_out")}
    if not means:
        return None
    return {"repeats": max(means), "top": means[max(means)], "once": means.get(1)}[which]


def _one_run(s: Source, which: str) -> Any:
    """From the checkpoint's one-run DP audit (tasks/leakage/audit_canaries.py; None without one): the
    largest bound over the canary kinds (Bonferroni over them), that kind's ceiling and canaries, the kind."""
    found = (s.checkpoint.get("extraction") or {}).get("one_run")
    if not found or found["kind"] is None:
        return None
    return found["kind"] if which == "kind" else found["kinds"][found["kind"]][which]


#: the ``shipped`` column of the model as trained (tasks/shipping's forms name the rest)
TRAINED = "trained"


def shipped_form(checkpoint: Any) -> str:
    """The form a checkpoint record (or a row, a board record) was audited in: ``trained``, or its shipped
    form (tasks/shipping)."""
    return checkpoint.get("shipped") or TRAINED


def row_setting(spec: dict[str, Any], shipped: str = TRAINED) -> str:
    """The row's setting: its spec's without the seed (:func:`setting_of`), and a shipped form's apart
    from the trained model's (``<setting>+<form>``), so the board never merges the two."""
    setting = setting_of(spec)
    return setting if shipped == TRAINED else f"{setting}+{shipped}"


def trained_rows(rows: Any) -> list[Any]:
    """The rows of models as trained: what every comparison of techniques reads (``findings.md``'s
    *As shipped* reads the shipped forms' beside them). Rows all of one shipped form (a board built for
    that form) are compared among themselves: all of them."""
    if len({shipped_form(r) for r in rows}) == 1:
        return list(rows)
    return [r for r in rows if shipped_form(r) == TRAINED]


#: the low-FPR columns (:func:`_tpr_columns`)
TPR_COLUMNS = tuple(c.name for c in _tpr_columns())

#: every leaderboard column, in order (see the module docstring)
ROW: list[Column] = [
    Column("cell_id", lambda s: s.record["cell_id"], "string", setting=False),
    Column("model", lambda s: s.spec.model, "string"),
    Column("adaptation", lambda s: s.spec.adaptation, "string"),
    Column("dataset", lambda s: s.spec.dataset, "string"),
    Column("seed", lambda s: s.spec.seed, "int", setting=False),
    Column("epoch", lambda s: s.checkpoint["epoch"]),  # a checkpoint may fall inside an epoch
    Column("step", lambda s: s.checkpoint["step"], "int"),
    Column("best", lambda s: s.checkpoint["best"], "bool", setting=False),
    Column("attack", lambda s: s.attack, "string", "attack"),  # the key of the record's ``attacks``
    Column("access", lambda s: access_of(s.attack), "string", "attack"),
    Column("auc", lambda s: s.metrics["auc"], level="attack"),
    Column("auc_ci_low", lambda s: s.metrics["auc_ci"][0], level="attack"),
    Column("auc_ci_high", lambda s: s.metrics["auc_ci"][1], level="attack"),
    Column("tpr_at_0.1pct_fpr", lambda s: s.metrics["tpr_at_0.1pct_fpr"], level="attack"),
    Column("tpr_at_1pct_fpr", lambda s: s.metrics["tpr_at_1pct_fpr"], level="attack"),
    *_tpr_columns(),
    Column("n_members", lambda s: s.metrics["n_members"], "int", "attack"),
    Column("n_nonmembers", lambda s: s.metrics["n_nonmembers"], "int", "attack"),
    Column("utility_loss", lambda s: s.checkpoint["utility_loss"]),
    *_extraction_columns(),
    Column("exposure_repeats", lambda s: _exposure(s, "repeats"), "int", since=4),
    Column("exposure_top", lambda s: _exposure(s, "top"), setting=False, since=4),
    Column("exposure_once", lambda s: _exposure(s, "once"), setting=False, since=4),
    Column("trainable_params", lambda s: s.record["trainable_params"], "int"),
    Column("trainable_fraction", lambda s: trainable_fraction(s.record), since=2),
    Column("train_seconds", lambda s: s.record["train"]["seconds"]),
    Column("defence", lambda s: s.spec.defence, "string"),
    Column("epsilon", lambda s: s.checkpoint.get("epsilon")),
    Column("epsilon_target", lambda s: s.spec.defence_params.get("epsilon")),
    Column(
        "delta",
        lambda s: s.metrics.get("eps_delta", s.spec.defence_params.get("delta")),
        level="attack",
        setting=False,
    ),  # fmt: skip
    Column("eps_lower", lambda s: s.metrics.get("eps_lower"), level="attack"),
    Column("eps_ceiling", lambda s: s.metrics.get("eps_ceiling"), level="attack"),
    Column("eps_one_run", lambda s: _one_run(s, "eps_lower"), since=5),
    Column("eps_one_run_ceiling", lambda s: _one_run(s, "eps_ceiling"), setting=False, since=5),
    Column("one_run_canaries", lambda s: _one_run(s, "m"), "int", since=5),
    Column("one_run_kind", lambda s: _one_run(s, "kind"), "string", setting=False, since=5),
    Column("dp_violation", lambda s: bool(s.checkpoint.get("dp_violations")), "bool", "attack"),
    Column(
        "auc_repeated_vs_singleton",
        lambda s: s.metrics.get("auc_repeated_vs_singleton"),
        level="attack",
        setting=False,
    ),  # fmt: skip
    Column("shipped", lambda s: shipped_form(s.checkpoint), "string", since=6, missing=TRAINED),
    Column("setting", lambda s: row_setting(s.record["config"], shipped_form(s.checkpoint)), "string"),
    Column("runs", lambda s: 1, "int", "board"),  # rows a board row merges (1 in a results folder)
]

#: the board's setting rows: their order, with the columns merging seeds adds (kinds in
#: :data:`SETTING_KINDS`); a :data:`ROW` column with ``setting`` that is not named here comes last
SETTING_ORDER = (
    "setting", "model", "technique", "adaptation", "dataset", "defence", "epsilon_target", "shipped", "epoch", "step",
    "last", "attack", "access", "n_seeds", "seeds", "runs", "auc", "auc_std", "auc_ci_low", "auc_ci_high",
    "ci_over", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "n_members", "n_nonmembers", "utility_loss",
    "epsilon", "eps_lower", "eps_bounded", "eps_ceiling", "eps_one_run", "one_run_canaries", "dp_violation", "trainable_params",
    "trainable_fraction", "train_seconds", "replicas_agree", "cells",
)  # fmt: skip
SETTING_KINDS = {"technique": "string", "last": "bool", "n_seeds": "int", "seeds": "string", "auc_std": "float",
                 "ci_over": "string", "eps_bounded": "int", "replicas_agree": "bool", "cells": "string"}  # fmt: skip


#: A leaderboard row's type: :data:`ROW`'s columns with their kinds (``tests/test_leaderboard.py`` holds the
#: two equal, so a column is added in both or the test fails). Rows are built by :func:`row` and read as
#: ``Row``, so the type checker knows the column names their readers write; a reader that also takes the
#: board's rows (which merge these and add columns of their own) reads a ``Mapping[str, Any]``.
Row = TypedDict(
    "Row",
    {
        "cell_id": str,
        "model": str,
        "adaptation": str,
        "dataset": str,
        "seed": int | None,
        "epoch": float | None,
        "step": int | None,
        "best": bool | None,
        "attack": str,
        "access": str,
        "auc": float | None,
        "auc_ci_low": float | None,
        "auc_ci_high": float | None,
        "tpr_at_0.1pct_fpr": float | None,
        "tpr_at_1pct_fpr": float | None,
        "tpr_at_0.1pct_fpr_ci_low": float | None,
        "tpr_at_0.1pct_fpr_ci_high": float | None,
        "tpr_at_0.1pct_fpr_fpr_bound": float | None,
        "tpr_at_0.1pct_fpr_few": bool | None,
        "tpr_at_1pct_fpr_ci_low": float | None,
        "tpr_at_1pct_fpr_ci_high": float | None,
        "tpr_at_1pct_fpr_fpr_bound": float | None,
        "tpr_at_1pct_fpr_few": bool | None,
        "tpr_at_0fp_ci_low": float | None,
        "tpr_at_0fp_ci_high": float | None,
        "tpr_at_0fp_fpr_bound": float | None,
        "tpr_at_0fp": float | None,
        "n_members": int | None,
        "n_nonmembers": int | None,
        "utility_loss": float | None,
        "extraction_greedy_members": float | None,
        "extraction_greedy_nonmembers": float | None,
        "extraction_greedy_difference": float | None,
        "extraction_greedy_difference_ci_low": float | None,
        "extraction_greedy_difference_ci_high": float | None,
        "extraction_sampled_members": float | None,
        "extraction_sampled_nonmembers": float | None,
        "extraction_sampled_difference": float | None,
        "extraction_sampled_difference_ci_low": float | None,
        "extraction_sampled_difference_ci_high": float | None,
        "pii_reconstructed_members": float | None,
        "pii_reconstructed_nonmembers": float | None,
        "pii_reconstructed_difference": float | None,
        "pii_reconstructed_difference_ci_low": float | None,
        "pii_reconstructed_difference_ci_high": float | None,
        "pii_inferred_members": float | None,
        "pii_inferred_nonmembers": float | None,
        "pii_inferred_difference": float | None,
        "pii_inferred_difference_ci_low": float | None,
        "pii_inferred_difference_ci_high": float | None,
        "exposure_repeats": int | None,
        "exposure_top": float | None,
        "exposure_once": float | None,
        "trainable_params": int | None,
        "trainable_fraction": float | None,
        "train_seconds": float | None,
        "defence": str | None,
        "epsilon": float | None,
        "epsilon_target": float | None,
        "delta": float | None,
        "eps_lower": float | None,
        "eps_ceiling": float | None,
        "eps_one_run": float | None,
        "eps_one_run_ceiling": float | None,
        "one_run_canaries": int | None,
        "one_run_kind": str | None,
        "dp_violation": bool | None,
        "auc_repeated_vs_singleton": float | None,
        "shipped": str,
        "setting": str,
        "runs": int | None,
    },
    total=False,
)


def tpr_fields(metrics: dict[str, Any]) -> dict[str, Any]:
    """The :data:`TPR_COLUMNS` of one attack's metrics (None where a results folder predates them)."""
    return {name: read(metrics) for name, read in _TPR_READERS.items()}


def columns() -> list[str]:
    """The leaderboard's columns, in order."""
    return [c.name for c in ROW]


def row(source: Source) -> Row:
    """One leaderboard row of a finished cell."""
    return {c.name: c.value(source) for c in ROW}  # type: ignore[return-value]  # the columns are Row's


def missing_value(name: str) -> Any:
    """A column's value in a board record that predates it (:attr:`Column.missing`)."""
    return next((c.missing for c in ROW if c.name == name), None)


def record_fields(level: str, version: int) -> tuple[str, ...]:
    """The board record's fields of ``level`` (``cell`` or ``attack``) that schema ``version`` holds."""
    return tuple(c.name for c in ROW if c.level == level and c.since <= version and c.name != "attack")


def setting_columns() -> list[str]:
    """The board's setting rows' columns: :data:`SETTING_ORDER`, then any later ``setting`` column."""
    later = [c.name for c in ROW if c.setting and c.name not in SETTING_ORDER]
    return [*SETTING_ORDER, *later]


def kind_of(name: str) -> str:
    """A column's kind, from :data:`ROW` or :data:`SETTING_KINDS`."""
    found = {c.name: c.kind for c in ROW} | SETTING_KINDS
    return found[name]


def arrow_schema(names: list[str]) -> Any:
    """The parquet schema of these columns."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(name, types[kind_of(name)]) for name in names])
