"""``privauditor publish``'s exports (orchestrator/report/exports.py): each cell's last-checkpoint aggregates as
Hugging Face Hub evaluation results (``.eval_results`` entries and a ``model-index`` block) and as Every Eval
Ever records, checked field by field against their specifications, against Every Eval Ever's rules as a
JSON schema (with ``jsonschema``) and against ``huggingface_hub``'s own readers; and no sample text or id in any of them.
Rows are built synthetically: no model runs."""

from __future__ import annotations

import json
import re
import uuid

import jsonschema
import pytest
import yaml

from privauditor.orchestrator.report import exports
from privauditor.orchestrator.report.row_schema import columns

#: The rules of Every Eval Ever's aggregate record (version 0.3.0) that these exports must meet, stated here
#: as a JSON schema of our own from the format's published schema (https://github.com/evaleval/every_eval_ever,
#: ``every_eval_ever/schemas/eval.schema.json`` at commit 805ef1eb): the required fields, the enumerated
#: values, string-only ``additional_details``, and the three kinds of ``source_data``.
DETAILS = {"type": "object", "additionalProperties": {"type": "string"}}
SOURCE = {"type": "object", "required": ["dataset_name", "source_type"]}
EEE_RULES = {
    "type": "object",
    "required": ["schema_version", "evaluation_id", "retrieved_timestamp", "source_metadata", "model_info",
                 "eval_library", "evaluation_results"],
    "properties": {
        "source_metadata": {
            "type": "object",
            "required": ["source_type", "source_organization_name", "evaluator_relationship"],
            "properties": {
                "source_type": {"enum": ["documentation", "evaluation_run"]},
                "evaluator_relationship": {"enum": ["first_party", "third_party", "collaborative", "other"]},
                "additional_details": DETAILS,
            },
        },
        "eval_library": {"type": "object", "required": ["name", "version"]},
        "model_info": {
            "type": "object",
            "required": ["name", "id", "additional_details"],
            "properties": {"additional_details": DETAILS | {"required": ["deployment_type", "model_availability"]}},
        },
        "evaluation_results": {"type": "array", "items": {
            "type": "object",
            "required": ["evaluation_name", "source_data", "metric_config", "score_details"],
            "properties": {
                "source_data": {"oneOf": [
                    SOURCE | {"required": ["dataset_name", "source_type", "url"],
                              "properties": {"source_type": {"const": "url"}}},
                    SOURCE | {"properties": {"source_type": {"const": "hf_dataset"}}},
                    SOURCE | {"properties": {"source_type": {"const": "other"}}},
                ]},
                "metric_config": {"type": "object", "required": ["lower_is_better"], "properties": {
                    "lower_is_better": {"type": "boolean"},
                    "score_type": {"enum": ["binary", "continuous", "levels"]},
                    "metric_parameters": {"type": "object", "additionalProperties": {
                        "type": ["string", "number", "boolean", "null"]}},
                }},
                "score_details": {"type": "object", "required": ["score"], "properties": {
                    "score": {"type": "number"}, "details": DETAILS,
                }},
            },
        }},
    },
}  # fmt: skip


CANARY = "QZXV{:03d}CANARY"
FINISHED = "2026-12-02T12:56:24Z"
CELL = "tiny-gpt2__lora__sql__s0__b6b39d6a"


def row(cell_id=CELL, attack="loss", epoch=3.0, **changes):
    """A leaderboard row (every column) of a LoRA cell on the built-in ``sql`` dataset."""
    found = dict.fromkeys(columns())
    found |= {
        "cell_id": cell_id, "model": "tiny-gpt2", "adaptation": "lora", "dataset": "sql", "seed": 0,
        "epoch": epoch, "step": None if epoch is None else int(3 * epoch), "best": epoch == 3.0,
        "attack": attack, "access": "gray-box", "auc": 0.61234567, "auc_ci_low": 0.5012, "auc_ci_high": 0.7213,
        "tpr_at_1pct_fpr": 0.0833, "tpr_at_1pct_fpr_ci_low": 0.0103, "tpr_at_1pct_fpr_ci_high": 0.27,
        "tpr_at_1pct_fpr_fpr_bound": 0.12, "tpr_at_1pct_fpr_few": True, "n_members": 24, "n_nonmembers": 24,
        "utility_loss": 2.5, "trainable_params": 1000, "trainable_fraction": 0.01, "train_seconds": 1.0,
        "defence": "none", "setting": "abc", "runs": 1,
    }  # fmt: skip
    return found | changes


def rows():
    """Two checkpoints of a LoRA cell (two attacks each), a DP cell on a hub dataset, an audit of a file."""
    return [
        row(epoch=1.0, auc=0.99), row(epoch=1.0, attack="zlib", auc=0.98),  # earlier: left out
        row(), row(attack="zlib", auc=0.55, tpr_at_1pct_fpr=None, **{"tpr_at_0.1pct_fpr": 0.0}),
        row("tiny-gpt2__full+dp-e8__org--data__s1__0c0c0c0c", adaptation="full", dataset="org/data", seed=1,
            defence="dp", epsilon=7.5, auc=float("nan")),  # a NaN AUC is left out, its TPR is not
        row("audit__tiny-gpt2__checkpoint__653278c6", epoch=None, adaptation="none",
            dataset="/home/someone/private/clients.jsonl", attack="blind", access="model-free"),
    ]  # fmt: skip


def test_the_last_checkpoint_of_each_cell_by_attack():
    cells = exports.last_checkpoints(rows())
    assert list(cells) == sorted(cells) and len(cells) == 3
    assert [(r["epoch"], r["attack"]) for r in cells[CELL]] == [(3.0, "loss"), (3.0, "zlib")]
    assert [r["epoch"] for r in cells["audit__tiny-gpt2__checkpoint__653278c6"]] == [None]


def test_hub_eval_results_entries_follow_the_hub_spec():
    """hub-docs eval_results.yaml: a list of {dataset: {id, task_id[, revision]}, value[, verifyToken, date,
    source: {url[, name, user, org]}, notes]}."""
    cell = exports.last_checkpoints(rows())[CELL]
    entries = yaml.safe_load(exports._yaml(exports.hub_entries(cell, FINISHED, "9.9.9")))
    assert isinstance(entries, list)
    for entry in entries:
        assert set(entry) == {"dataset", "value", "date", "notes"}  # no source without a URL
        assert set(entry["dataset"]) == {"id", "task_id"} and entry["dataset"]["id"] == exports.HUB_BENCHMARK
        assert (
            isinstance(entry["value"], float) and isinstance(entry["date"], str) and entry["date"] == FINISHED
        )
        for part in ("privauditor 9.9.9", CELL, "technique lora", "on tiny-gpt2", "dataset sql", "seed 0",
                     "epoch 3"):  # fmt: skip
            assert part in entry["notes"]
    values = {e["dataset"]["task_id"]: e["value"] for e in entries}  # rounded; None TPRs left out
    assert values == {
        "sql/loss/auc": 0.6123,
        "sql/loss/auc_ci_low": 0.5012,
        "sql/loss/auc_ci_high": 0.7213,
        "sql/loss/tpr_at_1pct_fpr": 0.0833,
        "sql/zlib/auc": 0.55,
        "sql/zlib/auc_ci_low": 0.5012,
        "sql/zlib/auc_ci_high": 0.7213,
        "sql/zlib/tpr_at_0.1pct_fpr": 0.0,
    }  # fmt: skip
    with_source = exports.hub_entries(cell, FINISHED, "9.9.9", source_url="https://example.org/run")
    assert with_source[0]["source"] == {"url": "https://example.org/run", "name": "privauditor 9.9.9"}
    assert list(with_source[0]) == ["dataset", "value", "date", "source", "notes"]  # the spec's order

    hub = pytest.importorskip("huggingface_hub")
    if hasattr(hub, "parse_eval_result_entries"):  # the Hub client's reader of .eval_results files
        parsed = hub.parse_eval_result_entries(entries)
        assert [(p.dataset_id, p.task_id, p.value, p.date) for p in parsed] == [
            (exports.HUB_BENCHMARK, e["dataset"]["task_id"], e["value"], FINISHED) for e in entries
        ]
        assert hub.eval_result_entries_to_yaml(parsed) == entries  # nothing outside the spec


def test_hub_model_index_follows_the_model_card_spec():
    """hub-docs modelcard.md: model-index: [{name, results: [{task: {type[, name]}, dataset: {type, name,
    ...}, metrics: [{type, value[, name, ...]}][, source: {name, url}]}]}]."""
    model_index_to_eval_results = pytest.importorskip(
        "huggingface_hub.repocard_data"
    ).model_index_to_eval_results
    cells = exports.last_checkpoints(rows())
    block = yaml.safe_load(exports._yaml(exports.model_index(cells[CELL], "9.9.9")))
    assert list(block) == ["model-index"]
    (model,) = block["model-index"]
    assert model["name"] == CELL and len(model["results"]) == 2
    loss = model["results"][0]
    assert set(loss) == {"task", "dataset", "metrics"}
    assert loss["task"]["type"] == "text-generation" and "loss attack" in loss["task"]["name"]
    assert loss["dataset"] == {"type": "sql", "name": "sql"}
    assert [(m["type"], m["value"]) for m in loss["metrics"]] == [
        ("roc_auc", 0.6123), ("auc_ci_low", 0.5012), ("auc_ci_high", 0.7213), ("tpr_at_1pct_fpr", 0.0833)
    ]  # fmt: skip
    assert all(set(m) == {"type", "value", "name"} and "epoch 3" in m["name"] for m in loss["metrics"])
    name, results = model_index_to_eval_results(block["model-index"])
    assert name == CELL and len(results) == 4 + 4
    hub = exports.model_index(cells["tiny-gpt2__full+dp-e8__org--data__s1__0c0c0c0c"], "9.9.9")
    assert hub["model-index"][0]["results"][0]["dataset"] == {"type": "org/data", "name": "org/data"}


def test_every_eval_ever_records_validate_against_the_schema():
    validator = jsonschema.Draft7Validator(EEE_RULES)
    cells = exports.last_checkpoints(rows())
    records = {cell_id: exports.eee_record(cell, FINISHED, "9.9.9") for cell_id, cell in cells.items()}
    for record in records.values():
        errors = sorted(validator.iter_errors(record), key=lambda e: list(e.path))
        assert errors == [], [f"{list(e.path)}: {e.message}" for e in errors]
        # what the datastore's validator checks beyond the schema (validator/validation_core.py)
        path = exports.eee_path(record)
        parts = path.split("/")
        assert len(parts) == 5 and parts[:3] == ["data", "privauditor", "privauditor"]
        assert parts[3] == record["model_info"]["name"]
        assert uuid.UUID(parts[4].removesuffix(".json")).version == 4 and re.fullmatch(
            r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.json", parts[4]
        )
        assert exports.eee_path(record) == path  # derived, so publishing again gives the same path
        for result in record["evaluation_results"]:
            config, score = result["metric_config"], result["score_details"]["score"]
            assert config["min_score"] <= score <= config["max_score"]
        details = record["model_info"]["additional_details"]
        assert (
            details["deployment_type"] == "self_deployed"
            and details["model_availability"] == "closed_weights"
        )
        assert "sample_ids" not in json.dumps(record) and "detailed_evaluation_results" not in record

    lora = records[CELL]
    assert lora["schema_version"] == "0.3.0"
    assert lora["retrieved_timestamp"] == "1796216184"  # 2026-12-02T12:56:24Z in Unix seconds
    assert lora["evaluation_id"] == f"privauditor/privauditor/{CELL}/1796216184"
    assert lora["evaluation_timestamp"] == FINISHED
    assert lora["eval_library"] == {"name": "privauditor", "version": "9.9.9"}
    assert lora["source_metadata"] == {
        "source_name": "privauditor", "source_type": "evaluation_run", "source_organization_name": "unknown",
        "evaluator_relationship": "first_party",
        "additional_details": {"privauditor_version": "9.9.9", "cell_id": CELL, "technique": "lora",
                               "base_model": "tiny-gpt2", "dataset": "sql", "seed": "0", "defence": "none"},
    }  # fmt: skip
    assert lora["model_info"]["id"] == f"privauditor/{CELL}" and lora["model_info"]["name"] == CELL
    results = {r["evaluation_result_id"]: r for r in lora["evaluation_results"]}
    assert list(results) == ["loss.auc", "loss.tpr_at_1pct_fpr", "zlib.auc", "zlib.tpr_at_0.1pct_fpr"]
    auc = results["loss.auc"]
    assert auc["evaluation_name"] == "privauditor.membership_inference.sql.loss"
    assert auc["source_data"]["dataset_name"] == "sql" and auc["source_data"]["source_type"] == "other"
    assert auc["metric_config"] | {"evaluation_description": None} == {
        "evaluation_description": None, "metric_id": "auroc", "metric_name": "AUC", "metric_kind": "auroc",
        "metric_unit": "proportion", "lower_is_better": True, "score_type": "continuous", "min_score": 0.0,
        "max_score": 1.0,
    }  # fmt: skip
    assert auc["score_details"]["score"] == 0.61234567  # exact, not rounded
    assert auc["score_details"]["uncertainty"] == {
        "num_samples": 48,
        "confidence_interval": {"lower": 0.5012, "upper": 0.7213, "confidence_level": 0.95,
                                "method": "bootstrap percentile"},
    }  # fmt: skip
    assert (
        auc["score_details"]["details"]["epoch"] == "3.0" and auc["score_details"]["details"]["step"] == "9"
    )
    tpr = results["loss.tpr_at_1pct_fpr"]
    assert tpr["metric_config"]["metric_id"] == "tpr_at_fpr"
    assert tpr["metric_config"]["metric_parameters"] == {"fpr": 0.01}
    assert tpr["score_details"]["score"] == 0.0833
    assert tpr["score_details"]["uncertainty"]["confidence_interval"]["method"] == "clopper-pearson"
    assert tpr["score_details"]["details"]["few_false_positives_expected"] == "true"
    assert results["zlib.tpr_at_0.1pct_fpr"]["metric_config"]["metric_parameters"] == {"fpr": 0.001}

    dp = records["tiny-gpt2__full+dp-e8__org--data__s1__0c0c0c0c"]
    assert [r["evaluation_result_id"] for r in dp["evaluation_results"]] == ["loss.tpr_at_1pct_fpr"]  # no NaN
    assert dp["evaluation_results"][0]["source_data"]["source_type"] == "hf_dataset"
    assert dp["evaluation_results"][0]["source_data"]["hf_repo"] == "org/data"
    assert dp["model_info"]["additional_details"]["epsilon"] == "7.5"
    audit = records["audit__tiny-gpt2__checkpoint__653278c6"]
    assert audit["source_metadata"]["evaluator_relationship"] == "other"
    assert audit["evaluation_results"][0]["source_data"]["dataset_name"] == "clients.jsonl"
    assert "/home/someone" not in json.dumps(audit)  # a local file by its name, not the machine's folders


def test_the_rules_reject_what_the_format_rejects():
    """The rules constrain: a record missing a required field or with a non-string additional detail fails."""
    validator = jsonschema.Draft7Validator(EEE_RULES)
    record = exports.eee_record(exports.last_checkpoints(rows())[CELL], FINISHED, "9.9.9")
    assert validator.is_valid(record)
    assert not validator.is_valid({k: v for k, v in record.items() if k != "model_info"})
    record["source_metadata"]["additional_details"]["seed"] = 0
    assert not validator.is_valid(record)


def test_publish_writes_both_exports_without_sample_text(tmp_path, monkeypatch):
    """Through ``privauditor publish``: the files land under TO/eval_results/ and TO/every_eval_ever/, the
    same results give the same bytes, and canaries planted in the cells' per-sample files and in a row
    field the exports do not name appear in no exported byte."""
    from privauditor.orchestrator.report import leaderboard
    from privauditor.orchestrator.report.publish import publish

    results, public = tmp_path / "results", tmp_path / "public"
    found = [r | {"sample_id": f"client-{CANARY.format(i)}", "text": f"Client {CANARY.format(i)} owes $1037."}
             for i, r in enumerate(rows())]  # fmt: skip
    for cell_id in {r["cell_id"] for r in found}:
        cell = results / "cells" / cell_id
        cell.mkdir(parents=True)
        (cell / "cell.json").write_text(json.dumps({"cell_id": cell_id}))
        done = {"cell_id": cell_id} | ({} if cell_id.startswith("audit") else {"finished": FINISHED})
        (cell / "DONE").write_text(json.dumps(done))
        samples = [
            {"id": f"client-{CANARY.format(i)}", "target": f"Client {CANARY.format(i)}"} for i in range(5)
        ]
        (cell / "samples.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    monkeypatch.setattr(leaderboard, "rows", lambda out: found)
    monkeypatch.setattr(leaderboard, "write", lambda out, found: None)  # its files: tests/test_publish.py
    publish(results, public)

    def files(folder):
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    first = files(public)
    hub = sorted(p for p in first if p.startswith("eval_results/"))
    assert hub == sorted(f"eval_results/{c}{suffix}" for c in exports.last_checkpoints(rows())
                         for suffix in (".yaml", ".model-index.yaml"))  # fmt: skip
    eee = sorted(p for p in first if p.startswith("every_eval_ever/"))
    assert len(eee) == 3 and all(p.startswith("every_eval_ever/data/privauditor/privauditor/") for p in eee)
    validator = jsonschema.Draft7Validator(EEE_RULES)
    assert all(validator.is_valid(json.loads(first[p])) for p in eee)
    assert yaml.safe_load(first[f"eval_results/{CELL}.yaml"])[0]["date"] == FINISHED
    audit = json.loads(next(first[p] for p in eee if "/audit__" in p))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", audit["evaluation_timestamp"])  # DONE's own time
    leaked = [p for p, data in first.items() if b"CANARY" in data or b"client-" in data or b"owes" in data]
    assert leaked == []
    publish(results, public)
    assert files(public) == first  # byte-stable
