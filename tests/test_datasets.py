"""Dataset plugins and loaders: offline generation, local files, the hub code path, and bad records.

Contract tests are parametrised over ``DATASETS.names()``, so a new dataset plugin is tested without
editing this file. Nothing here reaches the network: the hub path is exercised on local directories.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path

# Read at import time by huggingface_hub / datasets in some versions, so set before anything imports them.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

from privauditor.tasks.datasets import DATASETS, DatasetPlugin, load_dataset  # noqa: E402
from privauditor.tasks.infra.errors import DataError, UnknownNameError  # noqa: E402

NAMES = DATASETS.names()
CANARY = "CANARY-7f3a-private-text"  # planted in records; must never show up in reports or errors


@pytest.fixture
def offline_hf(monkeypatch, tmp_path):
    """No network and a throwaway cache for ``datasets.load_dataset``."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "DOWNLOADED_DATASETS_PATH", tmp_path / "hf-cache" / "downloads")


def _plugin(name: str) -> DatasetPlugin:
    return DATASETS.get(name)()


def _as_real_columns(plugin: DatasetPlugin, record: Mapping[str, str]) -> dict[str, str]:
    """A record under the real dataset's column names (the inverse of ``column_map``)."""
    inverse = {ours: theirs for theirs, ours in plugin.column_map.items()}
    return {inverse.get(key, key): value for key, value in record.items()}


def _write_jsonl(path: Path, rows: list[Mapping]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _write_csv(path: Path, rows: list[Mapping]) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _write_parquet(path: Path, rows: list[Mapping]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


WRITERS = {"jsonl": _write_jsonl, "csv": _write_csv, "parquet": _write_parquet}


# --- every registered dataset (contract) ---------------------------------------------------------


def test_the_paper_datasets_are_registered():
    assert {"finance", "sql", "climate"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_plugin_declares_its_schema(name):
    cls = DATASETS.get(name)
    assert cls.name == name
    assert cls.instruction.strip() and "\n" not in cls.instruction
    assert cls.fields and not set(cls.fields) & set(cls.optional_fields)
    assert cls.hub_id and "/" in cls.hub_id
    assert cls.offline_size >= 2000
    assert set(cls.column_map.values()) <= set(cls.fields) | set(cls.optional_fields)
    assert cls.__doc__ and sys.modules[cls.__module__].__doc__  # the module docstring names the real set


@pytest.mark.parametrize("name", NAMES)
def test_offline_dataset_is_large_distinct_and_fully_rendered(name):
    plugin = _plugin(name)
    data = load_dataset(name)
    assert len(data.examples) == plugin.offline_size >= 2000
    assert not data.report.dropped and data.report.kept == data.report.total == len(data.examples)
    assert len({ex.text for ex in data.examples}) == len(data.examples)
    assert len({ex.sample_id for ex in data.examples}) == len(data.examples)
    assert {ex.prompt for ex in data.examples} == {plugin.instruction + "\n"}
    assert all(ex.target.strip() for ex in data.examples)

    records = plugin.generate(plugin.offline_size, 0)
    for record in random.Random(0).sample(records, 200):
        assert isinstance(record["id"], str) and record["id"]
        assert all(isinstance(value, str) for value in record.values())
        assert set(plugin.fields) <= set(record)
    by_id = {ex.sample_id: ex for ex in data.examples}
    for record in random.Random(1).sample(records, 200):
        target = by_id[record["id"]].target
        for field in (*plugin.fields, *plugin.optional_fields):
            if record.get(field):
                assert record[field] in target, f"{name}: field {field} of {record['id']} not in its target"


def generated(name, **kwargs):
    """Generated now, not served from the process's cache of offline datasets."""
    from privauditor.tasks.datasets import _offline

    _offline.cache_clear()
    return load_dataset(name, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_offline_dataset_is_deterministic_in_the_seed(name):
    random.seed(1)  # the generators must not depend on (or touch) the global random state
    first = generated(name, seed=3, size=2000)
    random.seed(2)
    again = generated(name, seed=3, size=2000)
    other = generated(name, seed=4, size=2000)
    assert load_dataset(name, seed=4, size=2000) is other  # generated once per process
    assert first.sha256 == again.sha256
    assert first.examples == again.examples
    assert other.sha256 != first.sha256
    overlap = {ex.target for ex in first.examples} & {ex.target for ex in other.examples}
    assert len(overlap) < 20  # another seed is another set of records, not a reshuffle


@pytest.mark.parametrize("name", NAMES)
def test_offline_dataset_does_not_move_with_the_clock(name, monkeypatch):
    """Faker's date helpers draw up to *now*: records built from them would change from one run to
    the next (and with them every split and score). A clock 11 years on must give the same records."""
    import faker.providers.date_time as faker_dates

    today = generated(name, seed=3, size=2000)

    class Later(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(days=4000)

    monkeypatch.setattr(faker_dates, "datetime", Later)
    later = generated(name, seed=3, size=2000)
    assert later.sha256 == today.sha256


# --- local files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("name", NAMES)
def test_local_file_in_real_columns_detects_the_plugin(tmp_path, name, fmt):
    plugin = _plugin(name)
    records = plugin.generate(25, 11)
    path = WRITERS[fmt](tmp_path / f"records.{fmt}", [_as_real_columns(plugin, r) for r in records])
    # No schema: the columns must pick the plugin — except a real `text` column, which reads as a
    # user's own texts unless the schema is named.
    schema = name if "text" in plugin.column_map else None
    data = load_dataset(str(path), schema=schema)
    assert not data.report.dropped and data.source == path.name
    assert [ex.sample_id for ex in data.examples] == [r["id"] for r in records]
    assert [ex.prompt for ex in data.examples] == [plugin.instruction + "\n"] * len(records)
    assert [ex.target for ex in data.examples] == [plugin.render_target(r) for r in records]


def test_finance_file_with_every_sujet_column(tmp_path):
    rows = [
        {
            "inputs": f"Acme {i} Holdings cut its dividend by {i}%.",
            "answer": "negative",
            "system_prompt": "You are a financial sentiment analyst.",
            "user_prompt": f"Acme {i} Holdings cut its dividend by {i}%.",
            "Unnamed: 0": i,
            "task_type": "sentiment_analysis",
            "dataset": "financial_phrasebank",
        }
        for i in range(1, 4)
    ]
    data = load_dataset(str(_write_parquet(tmp_path / "sujet.parquet", rows)))
    assert [ex.sample_id for ex in data.examples] == ["row-1", "row-2", "row-3"]
    assert data.examples[1].target == (
        "Task: sentiment_analysis\nInput: Acme 2 Holdings cut its dividend by 2%.\nAnswer: negative"
    )


def test_sql_file_with_every_gretel_column(tmp_path):
    row = {
        "id": 5097,
        "domain": "forestry",
        "domain_description": "Comprehensive data on sustainable forest management.",
        "sql_complexity": "single join",
        "sql_complexity_description": "only one join (specify inner, outer, cross)",
        "sql_task_type": "analytics and reporting",
        "sql_task_type_description": "generating reports, dashboards, and analytical insights",
        "sql_prompt": "What is the total volume of timber sold by each salesperson?",
        "sql_context": "CREATE TABLE salesperson (salesperson_id INT, name TEXT);",
        "sql": "SELECT name, SUM(volume) FROM salesperson GROUP BY name;",
        "sql_explanation": "Joins and groups by salesperson name.",
    }
    data = load_dataset(str(_write_jsonl(tmp_path / "gretel.jsonl", [row])))
    assert data.examples[0].sample_id == "5097"
    assert data.examples[0].target == (
        "Domain: forestry\nQuestion: What is the total volume of timber sold by each salesperson?\n"
        "Context: CREATE TABLE salesperson (salesperson_id INT, name TEXT);\n"
        "SQL: SELECT name, SUM(volume) FROM salesperson GROUP BY name;"
    )


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_climate_integer_labels_render_as_words(tmp_path, fmt):
    rows = [{"text": f"Statement number {i} on the carbon tax.", "label": i} for i in (0, 1, 2)]
    path = str(WRITERS[fmt](tmp_path / f"tweets.{fmt}", rows))
    # `text` columns are a user's own texts unless the schema is named.
    assert load_dataset(path).examples[0].target == rows[0]["text"]
    data = load_dataset(path, schema="climate")
    stances = [ex.target.rsplit("\n", 1)[-1] for ex in data.examples]
    assert stances == ["Stance: neutral", "Stance: oppose", "Stance: support"]
    assert _plugin("climate").render_target({"statement": "s", "stance": 2}).endswith("Stance: support")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_generic_prompt_target_file(tmp_path, fmt):
    rows = [
        {"id": f"g{i}", "prompt": "Summarise:\n", "target": f"Record {i} of a user's own data."}
        for i in range(4)
    ]
    data = load_dataset(str(WRITERS[fmt](tmp_path / f"own.{fmt}", rows)))
    assert [(ex.sample_id, ex.prompt, ex.target) for ex in data.examples] == [
        (r["id"], r["prompt"], r["target"]) for r in rows
    ]


def test_text_file_is_one_record_per_line(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("first private note\n\nsecond private note\nthird private note\n", encoding="utf-8")
    data = load_dataset(str(path))
    assert [ex.target for ex in data.examples] == [
        "first private note",
        "second private note",
        "third private note",
    ]
    assert {ex.prompt for ex in data.examples} == {""}
    assert [ex.sample_id for ex in data.examples] == ["line-1", "line-3", "line-4"]


def test_schema_overrides_detection(tmp_path):
    # `text` + `label` columns: read as the climate schema only when asked (or detected) as such.
    rows = [{"text": "We oppose the methane rule.", "label": "1"}]
    data = load_dataset(str(_write_jsonl(tmp_path / "x.jsonl", rows)), schema="climate")
    assert data.examples[0].target == "Statement: We oppose the methane rule.\nStance: oppose"


# --- the real (hub) code path, on local dataset directories --------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_hub_path_on_a_local_dataset_directory(tmp_path, offline_hf, name):
    plugin = _plugin(name)
    records = plugin.generate(12, 5)
    folder = tmp_path / f"{name}-dataset"
    folder.mkdir()
    _write_jsonl(folder / "train.jsonl", [_as_real_columns(plugin, r) for r in records])
    data = load_dataset(str(folder), schema=name)
    assert data.source == str(folder) and not data.report.dropped
    assert [ex.target for ex in data.examples] == [plugin.render_target(r) for r in records]
    assert [ex.sample_id for ex in data.examples] == [r["id"] for r in records]


def test_hub_path_keeps_integer_labels_and_ids_readable(tmp_path, offline_hf):
    folder = tmp_path / "tweet_eval"
    folder.mkdir()
    rows = [{"text": f"Tweet {i} about climate action.", "label": i % 3} for i in range(6)]
    _write_jsonl(folder / "train.jsonl", rows)
    data = load_dataset(str(folder), schema="climate")
    assert [ex.sample_id for ex in data.examples] == [f"row-{i}" for i in range(1, 7)]
    assert data.examples[5].target == "Statement: Tweet 5 about climate action.\nStance: support"


def test_hub_id_offline_is_a_clear_error(offline_hf):
    with pytest.raises(DataError, match="cannot load dataset 'sujet-ai/Sujet-Finance-Instruct-177k'") as info:
        load_dataset("sujet-ai/Sujet-Finance-Instruct-177k")
    assert "\n" not in str(info.value)


# --- bad records ---------------------------------------------------------------------------------


def _finance_row(row_id: str | None, text: str, answer: str = "positive") -> dict:
    row = {"inputs": f"{text} {CANARY}", "answer": answer, "task_type": "sentiment_analysis"}
    return {"id": row_id, **row} if row_id else row


def test_bad_records_are_reported_by_line_or_id_never_by_content(tmp_path):
    lines = [
        json.dumps(_finance_row("r1", "Acme rose 4%.")).encode(),  # 1 kept
        b"{}",  # 2 missing every field
        json.dumps({"id": "r-empty", "inputs": "", "answer": " ", "task_type": ""}).encode(),  # 3 empty
        b'{"inputs": "\xff\xfe ' + CANARY.encode() + b'"}',  # 4 invalid UTF-8
        b'{"inputs": "' + CANARY.encode() + b" broken",  # 5 invalid JSON
        json.dumps({"inputs": CANARY, "task_type": "qa"}).encode(),  # 6 missing answer
        json.dumps(_finance_row("r2", "Beta fell 2%.", "negative")).encode(),  # 7 kept
        json.dumps(_finance_row("r2-copy", "Beta fell 2%.", "negative")).encode(),  # 8 duplicate text
        json.dumps(_finance_row("r1", "Gamma was flat.", "neutral")).encode(),  # 9 duplicate id
        json.dumps(_finance_row("r-long", "Delta " * 200)).encode(),  # 10 over-long
        b"[1, 2]",  # 11 not an object
        b"   ",  # 12 blank: not a record
        json.dumps(_finance_row("r3", "Epsilon hired a CFO.", "neutral")).encode(),  # 13 kept
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    data = load_dataset(str(path), max_chars=500)
    report = data.report
    assert report.dropped == {
        "missing field task_type/input/answer": ["line 2"],
        "empty": ["id r-empty"],
        "not valid UTF-8": ["line 4"],
        "not valid JSON": ["line 5"],
        "missing field answer": ["line 6"],
        "duplicate": ["id r2-copy"],
        "duplicate id": ["id r1"],
        "over 500 characters": ["id r-long"],
        "not a JSON object": ["line 11"],
    }
    assert (report.total, report.kept) == (12, 3)
    assert [ex.sample_id for ex in data.examples] == ["r1", "r2", "r3"]
    summary = report.summary()
    assert summary.startswith("bad.jsonl: 12 rows, 3 kept; dropped ")
    for reason, locators in report.dropped.items():
        assert f"1 {reason} ({locators[0]})" in summary
    assert CANARY not in summary and "Acme" not in summary and "\n" not in summary


def test_csv_row_with_invalid_utf8_is_dropped_alone(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(
        b"inputs,answer,task_type\n"
        b"Acme rose 4%.,positive,sentiment_analysis\n"
        b"\xff" + CANARY.encode() + b",negative,sentiment_analysis\n"
    )
    data = load_dataset(str(path))
    assert data.report.dropped == {"not valid UTF-8": ["line 3"]} and data.report.kept == 1


def test_all_bad_file_is_a_one_line_data_error(tmp_path):
    path = tmp_path / "all_bad.jsonl"
    path.write_bytes(b'{"inputs": "' + CANARY.encode() + b'"}\n\xff' + CANARY.encode() + b"\n{broken\n{}\n")
    with pytest.raises(DataError) as info:
        load_dataset(str(path), schema="finance")
    message = str(info.value)
    assert "no usable records" in message and "4 rows, 0 kept" in message
    assert "\n" not in message and CANARY not in message


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_file_is_a_data_error(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError, match="empty|no usable records") as info:
        load_dataset(str(path))
    assert "\n" not in str(info.value)


def test_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataError, match="does not exist"):
        load_dataset(str(tmp_path / "missing.csv"), schema="sql")


def test_unknown_dataset_name_suggests_the_closest():
    with pytest.raises(DataError, match="did you mean 'finance'") as info:
        load_dataset("finanse")
    assert "\n" not in str(info.value)
    with pytest.raises(UnknownNameError, match="did you mean 'climate'"):
        load_dataset("notes.jsonl", schema="climat")


# --- dataset-specific checks ---------------------------------------------------------------------


def test_offline_sql_runs_against_its_own_context():
    plugin = _plugin("sql")
    for record in plugin.generate(300, 0):
        db = sqlite3.connect(":memory:")
        db.executescript(record["context"])
        rows = db.execute(record["sql"]).fetchall()
        assert rows and rows[0][0] is not None, f"{record['id']}: {record['sql']} found nothing"
        db.close()


def test_offline_records_cover_every_kind():
    finance = {r["task_type"] for r in _plugin("finance").generate(500, 0)}
    assert finance >= {
        "sentiment_analysis",
        "qa_with_context",
        "ner",
        "yes_no_question",
        "topic_classification",
    }
    sql = _plugin("sql").generate(500, 0)
    assert len({r["domain"] for r in sql}) >= 6
    for clause in ("JOIN", "GROUP BY", "ORDER BY", "COUNT(", "SUM(", "AVG(", "WHERE"):
        assert any(clause in r["sql"] for r in sql), clause
    climate = _plugin("climate").generate(500, 0)
    assert {r["stance"] for r in climate} == {"support", "oppose", "neutral"}
    assert len({r["policy"] for r in climate}) >= 5
