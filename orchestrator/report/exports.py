"""The aggregates of a results folder, or of a board, in two public formats: the Hugging Face Hub's
evaluation results (``TO/eval_results/``) and Every Eval Ever records (``TO/every_eval_ever/``). Built here
from leaderboard rows; the files are written by :mod:`.export_files`, for ``privauditor publish`` (one
results folder, beside its leaderboard) and ``privauditor board export`` (a board's merged cell rows:
:mod:`privauditor.orchestrator.board.export`, whose docstring says what a board's numbers are: means over
replicas, ``replicas`` and ``replicas_agree`` below). A row is read as a mapping of its columns: a results
folder's (:data:`~privauditor.orchestrator.report.row_schema.Row`) and a board's (with columns of its own,
``replicas_agree``) alike.

What is exported, per cell at its last checkpoint (:func:`privauditor.orchestrator.report.summary.final`: the
rows of the highest ``epoch``; an audit's one checkpoint, whose ``epoch`` is None) and per attack: the AUC,
the bounds of its 95 % bootstrap interval, and the TPR at 1 % and at 0.1 % FPR (each left out where the
leaderboard has none, or a non-finite value). Only named leaderboard fields are read, never a row as a
whole, and nothing else of the results folder but each cell's ``DONE`` (its finishing time): no sample
text, sample id or per-sample score can reach these files. The same results give the same bytes (the
times written are the cells' finishing times, never the time of publishing, or in a board export the date
its caller gives, since board records hold no time; the file names are derived).

**Hub** (``eval_results/<cell_id>.yaml``). One file per cell, because a cell is one adapted model (base x
technique x dataset x seed) and the Hub keeps evaluation results in that model's own repository: upload
it as ``.eval_results/privauditor.yaml`` of the adapted model's repo. Format: the list of entries of
``.eval_results/*.yaml`` (``dataset: {id, task_id}``, ``value``, ``date``, optional ``source: {url,
name}`` and ``notes``), as specified in huggingface/hub-docs ``eval_results.yaml`` (commit
2be4979eec528db07ad8cec06514a176fff50066) and ``docs/hub/eval-results.md`` (commit
b695d61c888a48332765d6b30de7e6c897a5bd60, https://huggingface.co/docs/hub/eval-results); it is what
``huggingface_hub.parse_eval_result_entries`` reads. An entry holds one number and no metric name: the
task names it. ``dataset.id`` is the benchmark dataset whose leaderboard the entry joins,
:data:`HUB_BENCHMARK` (the Hub shows a leaderboard only for a dataset registered as a benchmark whose
``eval.yaml`` lists the task ids; none is registered for privauditor yet, so until one is the entries
are valid but appear on no leaderboard); ``task_id`` is ``<dataset>/<attack>/<column>`` with the
leaderboard's column name (``auc``, ``auc_ci_low``, ``auc_ci_high``, ``tpr_at_1pct_fpr``,
``tpr_at_0.1pct_fpr``), values rounded to 4 decimals; ``date`` is the cell's finishing time; ``notes``
name the source (privauditor's version, the cell id, technique, base, dataset, seed, attack, checkpoint,
member counts). ``source`` needs a URL, which a results folder does not have: it is written only when
``source_url`` is given.

Since that format has no metric names and shows nothing without a registered benchmark, each cell also
gets ``eval_results/<cell_id>.model-index.yaml``: the older ``model-index`` block of a model card's YAML
front matter (huggingface/hub-docs ``modelcard.md``, commit 8e20cec6ab4623fe75230b8bf6a56d6a8c64300b;
``huggingface_hub.repocard_data.model_index_to_eval_results`` reads it), which the Hub shows on any model
page: merge it into the adapted model's ``README.md`` front matter. One result per attack (``task: {type:
text-generation, name}``, ``dataset: {type, name}``, ``metrics: [{type, value, name}]``); the AUC's metric
type is the Hub metric id ``roc_auc``, the others are the leaderboard's column names. The same block, with a
paragraph and a table to read it by, is ``eval_results/<cell_id>.model-card.md``
(:mod:`.model_card`): a section to paste into the model card.

A board row merges replicas (the same cell run again: ``runs`` > 1): the Hub notes then say "the mean of N
replicas", and Every Eval Ever's ``details`` carry ``replicas`` and ``replicas_agree``; a row of one run
(every results folder's) adds nothing, so publishing's bytes are as before.

**Every Eval Ever** (``every_eval_ever/data/privauditor/privauditor/<cell_id>/<uuid>.json``). The EvalEval
coalition's aggregate schema, ``every_eval_ever/schemas/eval.schema.json`` version 0.3.0 of
https://github.com/evaleval/every_eval_ever (commit 805ef1eb4859207dddf3ea0933644dfc8586b11d), laid out
as its datastore wants (``data/<collection>/<developer>/<model>/<uuid4>.json``, its README and
CONTRIBUTING.md), so its validator runs on the folder as it is. One record per cell (the schema's default
grain: one log per model, every result in ``evaluation_results``): ``model_info.id`` is
``privauditor/<cell_id>`` (the adapted model is not the base: the base, technique, dataset, seed and
defence are in ``model_info.additional_details``; ``model_availability`` is ``closed_weights`` since
publishing exports no weights, ``deployment_type`` ``self_deployed``); ``eval_library`` is privauditor
and its version (``importlib.metadata``); ``source_metadata`` is an ``evaluation_run`` of privauditor,
``first_party`` for a cell that adapted the model itself and ``other`` for an audit of a given checkpoint;
``evaluation_id`` is ``privauditor/<model id>/<retrieved_timestamp>`` and ``retrieved_timestamp`` the
cell's finishing time in Unix seconds (the schema's convention, kept stable); the uuid is derived from
``evaluation_id`` (a version-4 uuid from its sha256), so the path is stable too. One result per (attack,
metric): ``evaluation_name`` ``privauditor.membership_inference.<dataset>.<attack>``, metric ids
``auroc`` and ``tpr_at_fpr`` (with ``metric_parameters: {fpr}``), scores on ``[0, 1]`` with
``lower_is_better: true`` (higher means more leakage); the AUC's bootstrap interval and each TPR's
Clopper-Pearson interval go in ``score_details.uncertainty.confidence_interval`` and the member /
non-member counts in ``num_samples`` and ``details``. ``source_data`` names the dataset: a hub dataset id
as ``hf_dataset``, a local file by its file name alone and a built-in dataset by its name as ``other``.
Neither ``sample_ids`` nor ``detailed_evaluation_results`` is ever written.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.results import Results
from privauditor.tasks.spec.resolved import slug

from .summary import final

#: the Hub benchmark dataset the ``.eval_results`` entries name (not registered on the Hub yet)
HUB_BENCHMARK = "privauditor/membership-inference"
EEE_SCHEMA_VERSION = "0.3.0"
EEE_COLLECTION = "privauditor"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
#: a dataset name with one of these suffixes (or a path) is a local file: published by its file name only
LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt")
#: the leaderboard columns exported per attack, with what they are
METRICS = {
    "auc": "AUC",
    "auc_ci_low": "lower bound of the AUC's 95% bootstrap CI",
    "auc_ci_high": "upper bound of the AUC's 95% bootstrap CI",
    "tpr_at_1pct_fpr": "TPR at 1% FPR",
    "tpr_at_0.1pct_fpr": "TPR at 0.1% FPR",
}
#: the TPR columns and their false-positive rate
TPRS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0.1pct_fpr": 0.001}


def version() -> str:
    """The installed privauditor's version (``unknown`` when it runs from a checkout without metadata)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("privauditor")
    except PackageNotFoundError:
        return "unknown"


def finished_times(results: Path, cells: list[str]) -> dict[str, str]:
    """Each cell's finishing time (``YYYY-MM-DDTHH:MM:SSZ``): its ``DONE``'s ``finished``, else (an audit's
    ``DONE`` has none) the time ``DONE`` was written."""
    found, folder = {}, Results(results)
    for cell_id in cells:
        cell = folder.cell(cell_id)
        try:
            stamp = cell.finished()
        except (OSError, ValueError, AttributeError):
            stamp = None
        found[cell_id] = stamp or time.strftime(TIME_FORMAT, time.gmtime(int(cell.done_written())))
    return found


def last_checkpoints(found: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Per cell id (sorted), its rows at its last checkpoint, by attack."""
    cells: dict[str, list[Mapping[str, Any]]] = {}
    for row in final(found):
        cells.setdefault(row["cell_id"], []).append(row)
    return {cell_id: sorted(rows, key=lambda r: r["attack"]) for cell_id, rows in sorted(cells.items())}


def values(row: Mapping[str, Any]) -> dict[str, float]:
    """A row's exported :data:`METRICS`, rounded to 4 decimals as the Hub files and the model card show
    them (absent and non-finite values left out)."""
    return {column: round(value, 4) for column in METRICS if (value := _number(row.get(column))) is not None}


def replicas(row: Mapping[str, Any]) -> dict[str, Any]:
    """A board row's replica count and whether their AUCs agree; nothing for one run's row (``runs`` 1)."""
    runs = row.get("runs") or 1
    return {} if runs <= 1 else {"replicas": runs, "replicas_agree": bool(row.get("replicas_agree", True))}


def hub_entries(
    rows: Sequence[Mapping[str, Any]],
    finished: str,
    v: str,
    benchmark: str = HUB_BENCHMARK,
    source_url: str | None = None,
) -> list[dict[str, Any]]:
    """The ``.eval_results/*.yaml`` entries of one cell's last-checkpoint rows."""
    entries = []
    for row in rows:
        for column, meaning in METRICS.items():
            value = _number(row.get(column))
            if value is None:
                continue
            entry: dict[str, Any] = {
                "dataset": {
                    "id": benchmark,
                    "task_id": f"{slug(dataset_of(row)[1])}/{row['attack']}/{column}",
                },
                "value": round(value, 4),
                "date": finished,
            }
            if source_url:
                entry["source"] = {"url": source_url, "name": f"privauditor {v}"}
            entry["notes"] = f"{meaning} of {_context(row, v)}"
            entries.append(entry)
    return entries


def model_index(rows: Sequence[Mapping[str, Any]], v: str, source_url: str | None = None) -> dict[str, Any]:
    """The ``model-index`` block (model card front matter) of one cell's last-checkpoint rows."""
    results = []
    for row in rows:
        kind, name = dataset_of(row)
        metrics = [
            {"type": "roc_auc" if column == "auc" else column, "value": value,
             "name": f"{METRICS[column]} at {checkpoint(row)}"}
            for column, value in values(row).items()
        ]  # fmt: skip
        result: dict[str, Any] = {
            "task": {"type": "text-generation",
                     "name": f"Membership inference: {row['attack']} attack ({row.get('access', '?')} access)"},
            "dataset": {"type": name if kind == "hub" else slug(name), "name": name},
            "metrics": metrics,
        }  # fmt: skip
        if source_url:
            result["source"] = {"name": f"privauditor {v}", "url": source_url}
        results.append(result)
    return {"model-index": [{"name": rows[0]["cell_id"], "results": results}]}


def eee_record(
    rows: Sequence[Mapping[str, Any]], finished: str, v: str, organization: str = "unknown"
) -> dict[str, Any]:
    """The Every Eval Ever aggregate record (``eval.schema.json`` 0.3.0) of one cell's last-checkpoint rows."""
    first = rows[0]
    cell_id = first["cell_id"]
    model_id = f"privauditor/{cell_id}"
    retrieved = str(calendar.timegm(time.strptime(finished, TIME_FORMAT)))
    kind, name = dataset_of(first)
    cell = {"cell_id": cell_id, "technique": first["adaptation"], "base_model": first["model"], "dataset": name,
            "seed": first["seed"], "defence": first.get("defence") or "none"}  # fmt: skip
    if first.get("epsilon") is not None:
        cell["epsilon"] = first["epsilon"]
    model_details = {"deployment_type": "self_deployed", "model_availability": "closed_weights", **cell}
    if first.get("trainable_params") is not None:
        model_details["trainable_params"] = first["trainable_params"]
    return {
        "schema_version": EEE_SCHEMA_VERSION,
        "evaluation_id": f"privauditor/{model_id}/{retrieved}",
        "evaluation_timestamp": finished,
        "retrieved_timestamp": retrieved,
        "source_metadata": {
            "source_name": "privauditor",
            "source_type": "evaluation_run",
            "source_organization_name": organization,
            "evaluator_relationship": "other" if first["epoch"] is None else "first_party",
            "additional_details": _strings({"privauditor_version": v, **cell}),
        },
        "model_info": {"name": cell_id, "id": model_id, "additional_details": _strings(model_details)},
        "eval_library": {"name": "privauditor", "version": v},
        "evaluation_results": [result for row in rows for result in _eee_results(row, kind, name, finished)],
    }


def eee_path(record: dict[str, Any]) -> str:
    """Where Every Eval Ever's datastore keeps ``record``: ``data/<collection>/<developer>/<model>/<uuid>.json``
    (developer and model: the two parts of ``model_info.id``, a cell id being a file name already), the uuid
    (version 4 in form) derived from the record's ``evaluation_id``."""
    developer, model = record["model_info"]["id"].split("/", 1)
    digest = hashlib.sha256(record["evaluation_id"].encode()).digest()[:16]
    return f"data/{EEE_COLLECTION}/{developer}/{model}/{uuid.UUID(bytes=digest, version=4)}.json"


def dataset_of(row: Mapping[str, Any]) -> tuple[str, str]:
    """``(kind, name)`` of a row's dataset as published: ``file`` (by its file name, no folders), ``hub``
    (a dataset id) or ``privauditor`` (a built-in dataset)."""
    dataset = str(row["dataset"])
    if dataset.lower().endswith(LOCAL_SUFFIXES) or dataset.startswith(("/", ".", "~")):
        return "file", Path(dataset).name
    return ("hub" if "/" in dataset else "privauditor"), dataset


def _eee_results(row: Mapping[str, Any], kind: str, name: str, finished: str) -> list[dict[str, Any]]:
    attack, access = row["attack"], row.get("access", "?")
    n_members, n_nonmembers = int(row["n_members"]), int(row["n_nonmembers"])
    origin = {
        "hub": "Hugging Face dataset",
        "file": "local file",
        "privauditor": "privauditor built-in dataset",
    }
    details = {"origin": origin[kind], "split": f"{n_members} members (trained on) vs {n_nonmembers} held-out "
               f"non-members, drawn by privauditor with seed {row['seed']}"}  # fmt: skip
    source: dict[str, Any] = {"dataset_name": name, "source_type": "hf_dataset" if kind == "hub" else "other"}
    if kind == "hub":
        source["hf_repo"] = name
    source["additional_details"] = details
    common = {"attack": attack, "access": access, "checkpoint": checkpoint(row), "epoch": row["epoch"],
              "step": row.get("step"), "n_members": n_members, "n_nonmembers": n_nonmembers,
              **replicas(row)}  # fmt: skip
    against = f"the {n_members} members from the {n_nonmembers} non-members of {name}, at {checkpoint(row)}"
    results = []
    auc = _number(row.get("auc"))
    if auc is not None:
        metric: dict[str, Any] = {"evaluation_description": f"ROC AUC of the {attack} membership-inference attack ({access} "
                  f"access) separating {against}; 0.5: no leakage, higher: more leakage",
                  "metric_id": "auroc", "metric_name": "AUC", "metric_kind": "auroc"}  # fmt: skip
        interval = _interval(row, "auc", "bootstrap percentile")
        uncertainty = {"num_samples": n_members + n_nonmembers} | interval
        results.append(_eee_result(row, "auc", source, finished, metric, _score(auc, uncertainty, common)))
    for column, fpr in TPRS.items():
        tpr = _number(row.get(column))
        if tpr is None:
            continue
        metric = {"evaluation_description": f"True-positive rate of the {attack} membership-inference attack "
                  f"({access} access) at {fpr * 100:g}% false positives, separating {against}; higher: more "
                  "leakage", "metric_id": "tpr_at_fpr", "metric_name": METRICS[column], "metric_kind": "tpr",
                  "metric_parameters": {"fpr": fpr}}  # fmt: skip
        uncertainty = {"num_samples": n_members} | _interval(row, column, "clopper-pearson")
        extra = {"fpr_upper_bound_95": row.get(f"{column}_fpr_bound"),
                 "few_false_positives_expected": row.get(f"{column}_few")}  # fmt: skip
        results.append(
            _eee_result(row, column, source, finished, metric, _score(tpr, uncertainty, common | extra))
        )
    return results


def _interval(row: Mapping[str, Any], column: str, method: str) -> dict[str, Any]:
    """``{"confidence_interval": ...}`` of a column's 95 % interval (``<column>_ci_low/_high``), or ``{}``."""
    low, high = _number(row.get(f"{column}_ci_low")), _number(row.get(f"{column}_ci_high"))
    if low is None or high is None:
        return {}
    return {"confidence_interval": {"lower": low, "upper": high, "confidence_level": 0.95, "method": method}}


def _score(score: float, uncertainty: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    """An Every Eval Ever result's ``score_details``."""
    return {"score": score, "details": _strings(details), "uncertainty": uncertainty}


def _eee_result(
    row: Mapping[str, Any], column: str, source: dict[str, Any], finished: str, metric: dict[str, Any],
    score_details: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    metric = metric | {"metric_unit": "proportion", "lower_is_better": True, "score_type": "continuous",
                       "min_score": 0.0, "max_score": 1.0}  # fmt: skip
    return {
        "evaluation_result_id": f"{row['attack']}.{column}",
        "evaluation_name": f"privauditor.membership_inference.{slug(source['dataset_name'])}.{row['attack']}",
        "source_data": source,
        "evaluation_timestamp": finished,
        "metric_config": metric,
        "score_details": score_details,
    }


def _context(row: Mapping[str, Any], v: str) -> str:
    """Where a value comes from, for a Hub entry's notes."""
    defence = "" if (row.get("defence") or "none") == "none" else f", defence {row['defence']}"
    if row.get("epsilon") is not None:
        defence += f" (epsilon {row['epsilon']:g})"
    merged = replicas(row)
    if merged:
        agree = "" if merged["replicas_agree"] else ", whose AUCs differ: the interval is one replica's"
        defence += f"; the mean of {merged['replicas']} replicas (runs of this cell){agree}"
    return (f"the {row['attack']} membership-inference attack ({row.get('access', '?')} access) at "
            f"{checkpoint(row)}; privauditor {v}, cell {row['cell_id']}: technique {row['adaptation']} on "
            f"{row['model']}, dataset {dataset_of(row)[1]}, seed {row['seed']}{defence}; {row['n_members']} "
            f"members vs {row['n_nonmembers']} non-members; higher means more leakage")  # fmt: skip


def checkpoint(row: Mapping[str, Any]) -> str:
    """The checkpoint a row measured, in words."""
    if row["epoch"] is None:
        return "the audited checkpoint"
    return f"the last checkpoint (epoch {row['epoch']:g}, step {row.get('step')})"


def _number(value: Any) -> float | None:
    """``value`` as a finite float; None when absent, not a number, NaN or infinite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _strings(mapping: dict[str, Any]) -> dict[str, str]:
    """Every Eval Ever's ``additional_details`` / ``details`` maps hold strings only (None left out)."""
    return {key: json.dumps(value) if isinstance(value, bool) else str(value)
            for key, value in mapping.items() if value is not None}  # fmt: skip


def yaml_text(data: Any) -> str:
    """``data`` as the YAML the Hub files hold (block style, keys in their given order)."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110)
