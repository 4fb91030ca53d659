"""Board records: one immutable JSON document per (cell, checkpoint) of a results folder.

A record holds aggregates and provenance only: the leaderboard's per-cell fields, per attack the
metrics (AUC and its CI, TPRs with their intervals and FPR bounds, counts, the empirical ε bound,
duplication's AUC), and where the numbers came from (package versions and git revision, the resolved
spec, split and adapter hashes, hardware, wall times). No sample text, ids, token ids, per-sample scores
or ROC points, and no time of adding, so the same results always give the same bytes (:func:`canonical`).

Its ``key`` hashes the cell's definition (its resolved spec) and the run it came from (the results
folder's ``run_id`` in ``privauditor.json``, the cell id and the checkpoint's **step**: epochs may be
fractions, steps are whole): adding a folder again finds the same keys and the same bytes. ``setting``
hashes the spec without its seed, so cells that differ only in seed share a setting (the board
aggregates them), and cells with the same id from different runs are replicas of one sample.

Schema versions: 2 (written) adds ``trainable_fraction`` and the low-FPR fields of
:data:`privauditor.orchestrator.report.row_schema.TPR_COLUMNS` and keys by step. A schema-1 record (keyed by
epoch) is still read: :func:`problems` checks it against its own fields and its key with the epoch
rule, and :func:`upgrade` fills the newer fields with ``None`` in memory; its stored bytes and key stay.
Schema 6 adds ``shipped``: the form the checkpoint was audited in (``trained``, or a shipped form of the
last checkpoint: tasks/shipping). A shipped form's key and setting add the form; a trained model's are as
before, so a record of an earlier version reads as the model ``trained`` (its :attr:`Column.missing`).
"""

from __future__ import annotations

import json
import math
import sys
import uuid
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.cache import stable_hash
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.results import Results

from ..report.row_schema import TRAINED, columns, missing_value, record_fields, row_setting, shipped_form

FORMAT = "privauditor-board-record"
SCHEMA_VERSION = 6  # 3: extraction rates; 4: PII inference, canary exposure; 5: one-run DP audit; 6: shipped
#: the versions this privauditor reads: a record of an earlier one lacks the columns added since
VERSIONS = tuple(range(1, SCHEMA_VERSION + 1))
PROVENANCE_FIELDS = (
    "versions", "results_format", "spec", "split", "adaptation_hash", "hardware", "timings", "train",
    "defence",
)  # fmt: skip
#: names that would carry per-sample data: a record with one is refused with this reason
PER_SAMPLE = {
    "sample_id", "sample_ids", "ids", "token_ids", "logp", "mu", "sigma", "score", "scores", "text",
    "texts", "prompt", "target", "roc", "neighbours",
}  # fmt: skip


def fields(version: int = SCHEMA_VERSION) -> tuple[str, ...]:
    """A record's fields in schema ``version`` (every one present; ``None`` where it does not apply): the
    row schema's cell-level columns of that version, between the record's own."""
    return ("format", "schema_version", "key", "run", *record_fields("cell", version), "attacks", "provenance",
            "supersedes")  # fmt: skip


def attack_fields(version: int = SCHEMA_VERSION) -> tuple[str, ...]:
    """Per attack, in schema ``version``: the row schema's attack-level columns of that version."""
    return record_fields("attack", version)


def canonical(record: dict[str, Any]) -> bytes:
    """The one byte form of a record: sorted keys, no spaces, ASCII, NaN as null, a final newline."""
    return (
        json.dumps(_finite(record), sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    ).encode()


def content_hash(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def record_key(spec: dict[str, Any], run: str, cell_id: str, step: int | None, shipped: str = TRAINED) -> str:
    """A schema-2 record's key: its cell's definition, its run, its cell id and its checkpoint's step (and
    from schema 6 a shipped form's name; the model as trained keys as before)."""
    key = {"cell": stable_hash(spec, 64), "run": run, "cell_id": cell_id, "step": step}
    return stable_hash(key if shipped == TRAINED else key | {"shipped": shipped}, 32)


def record_key_v1(spec: dict[str, Any], run: str, cell_id: str, epoch: int | None) -> str:
    """A schema-1 record's key: as :func:`record_key`, with the checkpoint's epoch."""
    return stable_hash({"cell": stable_hash(spec, 64), "run": run, "cell_id": cell_id, "epoch": epoch}, 32)


def expected_key(record: dict[str, Any]) -> str:
    """The key a record must carry, by the rule of its own schema version."""
    spec, run, cell_id = record["provenance"]["spec"], record["run"], record["cell_id"]
    if record["schema_version"] == 1:
        return record_key_v1(spec, run, cell_id, record["epoch"])
    return record_key(spec, run, cell_id, record["step"], shipped_form(record))


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """A valid record of any readable version with every current field (``None`` where its version had
    none); its ``schema_version`` and ``key`` stay as stored."""
    if record["schema_version"] == SCHEMA_VERSION:
        return record
    per_attack = attack_fields()
    attacks = {name: {k: metrics.get(k) for k in per_attack} for name, metrics in record["attacks"].items()}
    return {k: record.get(k, missing_value(k)) for k in fields()} | {"attacks": attacks}


def run_id(results: Any) -> str:
    """The results folder's run id (``privauditor.json``), given to a folder written before run ids."""
    from privauditor.tasks.infra.files import write_json

    marker = results.root / "privauditor.json"
    if not results.fetch("privauditor.json"):
        raise PrivauditorError(f"{results.uri} has no privauditor.json: not a results folder")
    found = json.loads(marker.read_text())
    if not found.get("run_id"):
        write_json(marker, found | {"run_id": uuid.uuid4().hex})
        results.upload("privauditor.json")
        found = json.loads(marker.read_text())
    return found["run_id"]


def from_results(location: str | Path, supersedes: dict[tuple, str] | None = None) -> list[dict[str, Any]]:
    """Every record of a results folder (a path or an object-store URI), in cell and step order; audits
    (``privauditor audit``) are not benchmark cells and are left out (a folder of audits only is refused).
    ``supersedes`` maps (model, technique, dataset, seed, step, shipped) to the key of a record these replace."""
    from privauditor.orchestrator.report.leaderboard import rows

    results = Results.at(location)
    results.check_readable()  # before run_id gives an older folder a run id
    run = run_id(results)
    results.pull_summaries()
    by_cell: dict[tuple[str, Any, str], list[dict[str, Any]]] = {}
    for row in rows(results.root):
        by_cell.setdefault((row["cell_id"], row["step"], row["shipped"]), []).append(row)
    cells = {c: results.cell(c).record() for c, _, _ in by_cell}
    audits = {c for c, cell in cells.items() if "audit" in cell}
    if audits and audits == set(cells):
        raise PrivauditorError(
            f"{location} holds audits of a user's own model ({len(audits)}), not benchmark cells: the board "
            "compares benchmark runs; an audit's result is its own report"
        )
    if audits:  # a third-party audit beside benchmark cells is left out of the board: said, not silent
        shown = ", ".join(sorted(audits)[:3]) + (" ..." if len(audits) > 3 else "")
        print(f"skipped {len(audits)} audit(s) of a user's own model ({shown}): the board compares benchmark "
              "cells; an audit's result is its own report", file=sys.stderr)  # fmt: skip
    records = []
    for (cell_id, step, shipped), found in by_cell.items():
        if cell_id in audits:
            continue
        cell = cells[cell_id]
        audited = cell["checkpoints"] if shipped == TRAINED else cell.get("shipped", [])
        checkpoint = next(c for c in audited if c.get("step") == step and shipped_form(c) == shipped)
        record = _record(run, cell, checkpoint, found)
        named = (supersedes or {}).get(identity(record))
        record["supersedes"] = [named] if named else []
        records.append(record)
    return records


def _record(run: str, cell: dict[str, Any], checkpoint: dict[str, Any], found: list[dict]) -> dict[str, Any]:
    first, spec = found[0], cell["config"]
    record = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "run": run}
    record |= {k: first[k] for k in fields() if k in first}
    record["attacks"] = {r["attack"]: {k: r[k] for k in attack_fields()} for r in found}
    record["provenance"] = {
        "versions": cell.get("versions", {}),
        "results_format": cell["provenance"].get("results_format"),
        "spec": spec,
        "split": cell["provenance"]["split"],
        "adaptation_hash": checkpoint.get("adaptation_hash"),
        "hardware": cell.get("hardware") or {"device": cell.get("device")},
        "timings": cell.get("timings", {}),
        "train": cell.get("train", {}),
        "defence": cell.get("defence", {"name": "none"}),
    }
    record["key"] = record_key(spec, run, cell["cell_id"], checkpoint["step"], shipped_form(checkpoint))
    return record


def identity(record: dict[str, Any]) -> tuple:
    """What a correction must share with the record it supersedes: the same cell at the same step in the
    same form (of any schema version), up to the settings a fix may change."""
    from privauditor.tasks.spec.resolved import technique_of

    technique = technique_of(record["cell_id"], record["adaptation"])
    shipped = shipped_form(record)
    return (record["model"], technique, record["dataset"], record["seed"], record["step"], shipped)


def rows_of(record: dict[str, Any], runs: int = 1) -> list[dict[str, Any]]:
    """The record (of any readable version) as leaderboard rows
    (:func:`privauditor.orchestrator.report.row_schema.columns`)."""
    names = columns()
    record = upgrade(record)
    cell = {k: record[k] for k in fields() if k in names} | {"runs": runs}
    return [
        {c: ({"attack": attack} | cell | metrics).get(c) for c in names}
        for attack, metrics in sorted(record["attacks"].items())
    ]


def problems(record: Any, path: str = "") -> list[str]:
    """What is wrong with one record, one line each (empty: a valid record)."""
    where = f"{path}: " if path else ""
    if not isinstance(record, dict):
        return [f"{where}a record is a JSON object"]
    version = record.get("schema_version")
    if record.get("format") != FORMAT or version not in VERSIONS or isinstance(version, bool):
        return [
            f"{where}schema {record.get('format')!r} version {version!r} is not {FORMAT!r} version "
            f"{', '.join(map(str, VERSIONS[:-1]))} or {VERSIONS[-1]}, the ones this privauditor reads"
        ]
    found = _fields(record, fields(version), where, "")
    attacks = record.get("attacks")
    if not isinstance(attacks, dict) or not attacks:
        found.append(f"{where}no attack results")
    else:
        for name, metrics in attacks.items():
            found += _fields(metrics, attack_fields(version), where, f"attacks.{name}.")
            auc = metrics.get("auc") if isinstance(metrics, dict) else None
            if not isinstance(auc, int | float) or not 0 <= auc <= 1:
                found.append(f"{where}attacks.{name}.auc is {auc!r}, not a number in [0, 1]")
    provenance = record.get("provenance")
    found += _fields(provenance, PROVENANCE_FIELDS, where, "provenance.")
    found += [f"{where}per-sample field provenance.{p}" for p in _per_sample(provenance)]
    if isinstance(provenance, dict) and not found:
        if not (provenance["versions"] or {}).get("privauditor"):
            found.append(f"{where}provenance.versions names no privauditor version")
        if not provenance["split"]:
            found.append(f"{where}provenance.split holds no split hashes")
        expected, by = expected_key(record), "epoch" if version == 1 else "step"
        if record["key"] != expected:
            found.append(
                f"{where}key {record['key']} is not the hash of its spec, run, cell and {by} ({expected})"
            )
        if record["setting"] != row_setting(provenance["spec"], shipped_form(record)):
            found.append(
                f"{where}setting {record['setting']} is not the hash of its spec without the seed (and its "
                "shipped form)"
            )
    if not isinstance(record.get("supersedes"), list):
        found.append(f"{where}supersedes is a list of record keys")
    return found


def _fields(found: Any, expected: tuple[str, ...], where: str, prefix: str) -> list[str]:
    if not isinstance(found, dict):
        return [f"{where}{prefix.rstrip('.') or 'record'} is not an object"]
    lines = []
    for name in sorted(set(found) - set(expected)):
        kind = "per-sample field" if name in PER_SAMPLE else "unknown field"
        lines.append(f"{where}{kind} {prefix}{name}: a board record holds aggregates and provenance only")
    return lines + [f"{where}missing field {prefix}{name}" for name in expected if name not in found]


def _per_sample(value: Any, prefix: str = "") -> list[str]:
    """Lists under a per-sample name at any depth (the spec's settings are numbers and objects)."""
    if not isinstance(value, dict):
        return []
    hits = []
    for key, inner in value.items():
        if key in PER_SAMPLE and isinstance(inner, list):
            hits.append(prefix + key)
        hits += _per_sample(inner, f"{prefix}{key}.")
    return hits
