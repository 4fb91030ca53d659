"""The public exports (orchestrator/report/exports.py), of ``privauditor publish`` and ``privauditor board
export``: each cell's last-checkpoint aggregates as Hugging Face Hub evaluation results (``.eval_results``
entries, a ``model-index`` block and a model-card section whose numbers are the block's) and as Every Eval
Ever records, checked field by field against their specifications, against Every Eval Ever's rules as a
JSON schema (with ``jsonschema``) and against ``huggingface_hub``'s own readers; and no sample text or id in
any of them. A board's export holds the mean of a cell's replicas, the same bytes for the same store, and
bad input is one line. Rows and board records are built synthetically: no model runs."""

from __future__ import annotations

import calendar
import json
import re
import time
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.report import exports, model_card
from privauditor.orchestrator.report.row_schema import columns

from .test_board_ranking import record as board_record
from .test_board_ranking import store_of

SCHEMAS = Path(__file__).parent / "schemas"
#: Every Eval Ever's published JSON schema of an aggregate record, version 0.3.0, vendored unchanged
#: (tests/schemas/README.md: where from, its licence)
EEE_RULES = json.loads((SCHEMAS / "every_eval_ever" / "eval.schema.json").read_text())


def hub_rules() -> dict:
    """A JSON schema of one ``.eval_results`` entry, read from the Hub's published template (vendored
    ``hub/eval_results.yaml``): its first entry's keys, nested as indented there, each required where its
    comment says ``Required`` (``source.url``: once ``source`` is given; ``dataset``, which has no comment,
    because its ``id`` is), no other key; ``value`` a number
    and everything else a string, as the template's examples and "Format this as a string" have them."""
    template = (SCHEMAS / "hub" / "eval_results.yaml").read_text().split("\n# or", 1)[0]
    root: dict = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    parents, bare = [(-1, root)], []
    for line in template.splitlines():
        found = re.match(r"^(\s*)(?:- )?([A-Za-z_]+):\s*(\S*)\s*(?:#\s*(.*))?$", line)
        if not found:
            continue
        indent = len(found.group(1)) + (2 if line.lstrip().startswith("- ") else 0)
        name, value, comment = found.group(2), found.group(3), found.group(4) or ""
        while parents[-1][0] >= indent:
            parents.pop()
        parent = parents[-1][1]
        if value:  # a leaf
            parent["properties"][name] = {"type": "number" if name == "value" else "string"}
        else:
            parent["properties"][name] = child = {"type": "object", "properties": {}, "required": [],
                                                  "additionalProperties": False}  # fmt: skip
            parents.append((indent, child))
            if not comment:  # no word of its own (``dataset``): required where a key inside it is
                bare.append((parent, name, child))
        if comment.startswith("Required"):
            parent["required"].append(name)
    for parent, name, child in bare:
        if child["required"]:
            parent["required"].append(name)
    return {"type": "array", "items": root}


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
    entries = yaml.safe_load(exports.yaml_text(exports.hub_entries(cell, FINISHED, "9.9.9")))
    rules = hub_rules()
    assert sorted(rules["items"]["required"]) == ["dataset", "value"]  # the template read as its comments say
    assert rules["items"]["properties"]["dataset"]["required"] == ["id", "task_id"]
    jsonschema.Draft7Validator(rules).validate(entries)
    jsonschema.Draft7Validator(rules).validate(
        yaml.safe_load(
            exports.yaml_text(exports.hub_entries(cell, FINISHED, "9.9.9", source_url="https://x.org"))
        )
    )
    with pytest.raises(jsonschema.ValidationError):  # the schema can fail: an entry without its task
        jsonschema.Draft7Validator(rules).validate([{"dataset": {"id": "a/b"}, "value": 1.0}])
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
    block = yaml.safe_load(exports.yaml_text(exports.model_index(cells[CELL], "9.9.9")))
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
    from privauditor.tasks.infra.results import check_results_dir

    results, public = tmp_path / "results", tmp_path / "public"
    found = [r | {"sample_id": f"client-{CANARY.format(i)}", "text": f"Client {CANARY.format(i)} owes $1037."}
             for i, r in enumerate(rows())]  # fmt: skip
    check_results_dir(results)  # publish reads only folders privauditor wrote
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
                         for suffix in (".yaml", ".model-index.yaml", ".model-card.md"))  # fmt: skip
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


def card_numbers(text):
    """A model-card section's table, per attack: its numbers by the ``model-index`` metric type."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("attack", "---"):
            continue
        auc, _, interval = cells[2].partition(" [")
        numbers = {"roc_auc": auc, "tpr_at_1pct_fpr": cells[3], "tpr_at_0.1pct_fpr": cells[4]}
        if interval:
            numbers["auc_ci_low"], numbers["auc_ci_high"] = interval.rstrip("]").split(", ")
        found[cells[0]] = {k: float(v) for k, v in numbers.items() if v != "n/a"}
    return found


def index_numbers(block):
    """A ``model-index`` block's numbers per attack (the attack named in each result's task)."""
    return {
        re.search(r": (\S+) attack", result["task"]["name"]).group(1): {
            m["type"]: m["value"] for m in result["metrics"]
        }
        for result in block["model-index"][0]["results"]
    }


def test_the_model_card_section_shows_the_model_index_numbers():
    """Heading, what was measured, the table (every number the block's, ``n/a`` where it has none), how to
    read it, and the block itself, parsed back equal to :func:`exports.model_index`."""
    cell = exports.last_checkpoints(rows())[CELL]
    block = exports.model_index(cell, "9.9.9")
    text = model_card.section(cell, "9.9.9", exports.yaml_text(block))
    assert text.startswith("## Privacy audit (privauditor)\n")
    for part in ("privauditor 9.9.9", "`tiny-gpt2`", "`lora`", "`sql`", "24 records the model was trained on",
                 "24 held-out records", "epoch 3", "0.5 means", "no measurable leakage"):  # fmt: skip
        assert part in text, part
    assert "replicas" not in text  # one run's cell
    shown = card_numbers(text)
    assert shown == index_numbers(block)  # the same numbers, each one
    assert shown["loss"] == {
        "roc_auc": 0.6123,
        "auc_ci_low": 0.5012,
        "auc_ci_high": 0.7213,
        "tpr_at_1pct_fpr": 0.0833,
    }
    assert "| zlib | gray-box | 0.5500 [0.5012, 0.7213] | n/a | 0.0000 |" in text
    yaml_block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(yaml_block) == block and yaml_block == exports.yaml_text(block)
    dp = exports.last_checkpoints(rows())["tiny-gpt2__full+dp-e8__org--data__s1__0c0c0c0c"]
    dp_text = model_card.section(dp, "9.9.9", exports.yaml_text(exports.model_index(dp, "9.9.9")))
    assert "`full+dp-e8`" in dp_text and "(ε = 7.5)" in dp_text and "| loss | gray-box | n/a |" in dp_text


DATE = "2026-12-01"


def board(folder):
    """A store of two runs (a and b) of one block: ``none`` and ``lora`` cells in both (replicas), lora's
    ``loss`` AUC 0.60 in a and 0.70 in b, its TPR at 1 % FPR 0.10 and 0.20; a's earlier checkpoint (AUC
    0.99) is not the last; and a ``full`` cell of run b only."""
    a = [board_record("a", "m1", "none", 0.5), board_record("a", "m1", "lora", 0.60, loss={"tpr_at_1pct_fpr": 0.10}),
         board_record("a", "m1", "lora", 0.99, step=10)]  # fmt: skip
    b = [board_record("b", "m1", "none", 0.5), board_record("b", "m1", "lora", 0.70, loss={"tpr_at_1pct_fpr": 0.20}),
         board_record("b", "m1", "full", 0.80)]  # fmt: skip
    return store_of(folder, a + b), a[1]["cell_id"]


def export_board(store, to, *formats, date=DATE):
    argv = ["board", "export", str(store), "--to", str(to), "--date", date]
    return main(argv + [a for f in formats for a in ("--format", f)])


def files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_board_export_validates_averages_replicas_and_is_byte_stable(tmp_path, capsys):
    store, lora = board(tmp_path / "store")
    out = tmp_path / "public"
    assert export_board(store, out, "hf-eval-results", "every-eval-ever") == 0
    assert "3 cells from 6 records" in capsys.readouterr().out
    found = files(out)
    cells = sorted({p.split("/")[1].split(".")[0] for p in found if p.startswith("eval_results/")})
    assert len(cells) == 3 and lora in cells
    assert json.loads(found["board-export.json"]) == {
        "formats": ["hf-eval-results", "every-eval-ever"], "date": "2026-12-01T00:00:00Z", "cells": 3, "records": 6,
    }  # fmt: skip

    validator = jsonschema.Draft7Validator(EEE_RULES)
    eee = {
        p.split("/")[-2]: json.loads(data) for p, data in found.items() if p.startswith("every_eval_ever/")
    }
    assert sorted(eee) == cells
    for path, data in found.items():
        if path.startswith("every_eval_ever/"):
            errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(json.loads(data))]
            assert errors == [] and path == f"every_eval_ever/{exports.eee_path(json.loads(data))}"
    lora_record = eee[lora]
    midnight = str(calendar.timegm(time.strptime(DATE, "%Y-%m-%d")))
    assert (
        lora_record["retrieved_timestamp"] == midnight
        and lora_record["evaluation_timestamp"] == "2026-12-01T00:00:00Z"
    )
    results = {r["evaluation_result_id"]: r["score_details"] for r in lora_record["evaluation_results"]}
    assert results["loss.auc"]["score"] == pytest.approx(0.65)  # the replicas' mean, not a's or b's
    assert results["loss.tpr_at_1pct_fpr"]["score"] == pytest.approx(0.15)
    interval = results["loss.auc"]["uncertainty"]["confidence_interval"]
    assert (interval["lower"], interval["upper"]) == pytest.approx(
        (0.5, 0.7)
    )  # run a's (sorts first), not a mean
    assert results["loss.auc"]["details"]["replicas"] == "2"
    assert results["loss.auc"]["details"]["replicas_agree"] == "false"
    assert results["blind.auc"]["details"]["replicas_agree"] == "true"
    assert "replicas" not in {
        k for r in eee[cells[0]]["evaluation_results"] for k in r["score_details"]["details"]
    }

    entries = yaml.safe_load(found[f"eval_results/{lora}.yaml"])
    values = {e["dataset"]["task_id"]: e["value"] for e in entries}
    assert values["d/loss/auc"] == 0.65 and values["d/loss/tpr_at_1pct_fpr"] == 0.15
    assert {e["date"] for e in entries} == {"2026-12-01T00:00:00Z"}
    jsonschema.Draft7Validator(hub_rules()).validate(entries)
    assert all("the mean of 2 replicas" in e["notes"] for e in entries)
    block = yaml.safe_load(found[f"eval_results/{lora}.model-index.yaml"])
    card = found[f"eval_results/{lora}.model-card.md"].decode()
    assert card_numbers(card) == index_numbers(block) and index_numbers(block)["loss"]["roc_auc"] == 0.65
    assert "mean of 2 runs of this cell" in card and "AUCs differ (loss)" in card
    hub = pytest.importorskip("huggingface_hub")
    if hasattr(hub, "parse_eval_result_entries"):
        assert len(hub.parse_eval_result_entries(entries)) == len(entries)

    assert export_board(store, out, "hf-eval-results", "every-eval-ever") == 0
    assert files(out) == found  # the same store: the same bytes, replacing an earlier board export
    assert export_board(store, tmp_path / "again", "every-eval-ever", "hf-eval-results") == 0
    assert files(tmp_path / "again") == found
    assert export_board(store, tmp_path / "hub", "hf-eval-results") == 0
    only = files(tmp_path / "hub")
    assert {p.split("/")[0] for p in only} == {"eval_results", "board-export.json"}
    assert all(only[p] == found[p] for p in only if p != "board-export.json")


def test_board_export_refuses_bad_input_in_one_line(tmp_path, capsys):
    store, _ = board(tmp_path / "store")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    before = {"store": files(store), "taken": files(taken)}
    cases = {
        "unknown export format 'csv'": (store, tmp_path / "out", ["csv"], DATE),
        "is not a board store": (tmp_path / "no-store", tmp_path / "out", ["hf-eval-results"], DATE),
        "overlaps the store": (store, store / "public", ["hf-eval-results"], DATE),
        "is not an earlier board export": (store, taken, ["every-eval-ever"], DATE),
        "is neither a day": (store, tmp_path / "out", ["hf-eval-results"], "01/12/2026"),
    }
    for expected, (where, to, formats, date) in cases.items():
        capsys.readouterr()
        assert export_board(where, to, *formats, date=date) == 2, expected
        error = capsys.readouterr().err.strip()
        assert error.count("\n") == 0 and error.startswith("privauditor: error: ") and expected in error
    assert not (tmp_path / "out").exists() and not (tmp_path / "no-store").exists()
    assert {"store": files(store), "taken": files(taken)} == before  # nothing written, nothing half-written
    assert not [p for p in tmp_path.rglob(".*tmp-*")]
