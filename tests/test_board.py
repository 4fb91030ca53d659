"""The board: two sweeps' results folders merge into one append-only store, the board aggregates their
overlapping settings by seed, adding again changes no byte, conflicts and bad records are refused, two
concurrent adds lose nothing, and no canary planted in the members reaches the store, the site or W&B
(end to end, ``slow``). The ranking on synthetic records: ``test_board_ranking.py``."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from privauditor.orchestrator.board.check import check
from privauditor.orchestrator.board.merge import cell_rows
from privauditor.orchestrator.board.records import canonical, content_hash, from_results, record_key
from privauditor.orchestrator.board.store import Store
from privauditor.orchestrator.cli import main
from privauditor.orchestrator.report.row_schema import TPR_COLUMNS, columns, setting_columns

from .test_publish import canary_file, leaks


def sweep(name: str, data: Path, adaptations: list[str], seed: int) -> dict:
    return {
        "name": name,
        "matrix": {"model": ["tiny-gpt2"], "adaptation": adaptations, "dataset": [str(data)]},
        "seeds": [seed],
        "attacks": ["loss", "zlib", "blind"],
        "attack_params": {"blind": {"permutations": 20}},
        "split": {"members": 8, "nonmembers": 8, "validation": 4},
        "train": {"checkpoints": [1, 2], "lr": 0.003},
        "run": {"cpus_per_trial": 1, "max_failures": 0},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Sweep ``a`` (none, lora; seed 0) and sweep ``b`` (none, lora, head; seed 1) on canary records."""
    ray = pytest.importorskip("ray")
    folder = tmp_path_factory.mktemp("board")
    data = canary_file(folder / "clients.jsonl")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for name, adaptations, seed in (("a", ["none", "lora"], 0), ("b", ["none", "lora", "head"], 1)):
            (folder / f"{name}.yaml").write_text(yaml.safe_dump(sweep(name, data, adaptations, seed)))
            assert main(["run", str(folder / f"{name}.yaml"), "--out", str(folder / name)]) == 0
    finally:
        ray.shutdown()
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def copy_as_new_run(source: Path, target: Path) -> Path:
    """The same results as another run would give (a results folder without its run id gets a new one)."""
    shutil.copytree(source, target)
    marker = target / "privauditor.json"
    marker.write_text(json.dumps({k: v for k, v in json.loads(marker.read_text()).items() if k != "run_id"}))
    return target


@pytest.mark.ray
@pytest.mark.slow
def test_two_sweeps_merge_by_seed_and_adding_again_changes_nothing(runs, tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["board", "add", str(runs / "a"), str(store)]) == 0
    records_a = check(Store(store))[0]
    for r in (
        records_a
    ):  # written as schema 6: keyed by step, the trainable fraction, low-FPR, extraction, exposure, one-run,
        # shipped (the models as trained here)
        assert r["schema_version"] == 6 and r["trainable_fraction"] is not None and "eps_one_run" in r
        assert r["shipped"] == "trained"
        assert {"extraction_greedy_members", "extraction_sampled_difference_ci_high", "exposure_top"} <= set(
            r
        )
        assert r["key"] == record_key(r["provenance"]["spec"], r["run"], r["cell_id"], r["step"])
        assert all(set(TPR_COLUMNS) <= set(m) for m in r["attacks"].values())
    # one schema: the board's cell rows of one run are that results folder's leaderboard rows
    folder_rows = pq.read_table(runs / "a" / "leaderboard.parquet").to_pylist()
    assert [{c: r[c] for c in columns()} for r in cell_rows(records_a)] == sorted(
        folder_rows, key=lambda r: (r["cell_id"], r["step"], r["attack"])
    )
    before = snapshot(store)
    capsys.readouterr()
    assert main(["board", "add", str(runs / "a"), str(store)]) == 0
    assert f"0 records added, {len(records_a)} already there" in capsys.readouterr().out
    assert snapshot(store) == before
    assert main(["board", "add", str(runs / "b"), str(store)]) == 0
    assert main(["board", "add", str(copy_as_new_run(runs / "a", tmp_path / "a-again")), str(store)]) == 0
    site = tmp_path / "site"
    assert main(["board", "build", str(store), "--out", str(site)]) == 0

    settings = pq.read_table(site / "settings.parquet")
    assert settings.column_names == setting_columns()
    assert pq.read_table(site / "leaderboard.parquet").column_names == columns()
    cells = {
        (r["cell_id"], r["epoch"], r["attack"]): r
        for r in pq.read_table(site / "leaderboard.parquet").to_pylist()
    }
    rows = {(r["technique"], r["epoch"], r["attack"]): r for r in settings.to_pylist()}
    lora = rows[("lora", 2, "loss")]
    assert lora["n_seeds"] == 2 and lora["seeds"] == "0,1" and lora["ci_over"] == "seeds"
    assert lora["runs"] == 3  # seed 0 twice (a and its rerun: replicas, one sample), seed 1 once
    by_seed = [cells[(c, 2, "loss")] for c in lora["cells"].split()]
    assert [c["runs"] for c in by_seed] == [2, 1]
    assert lora["auc"] == pytest.approx(sum(c["auc"] for c in by_seed) / 2)
    assert lora["auc_ci_low"] <= lora["auc"] <= lora["auc_ci_high"]
    head = rows[("head", 2, "loss")]
    assert head["n_seeds"] == 1 and head["ci_over"] == "samples" and head["runs"] == 1
    assert rows[("none", 0, "blind")]["n_seeds"] == 2 and rows[("lora", 1, "loss")]["last"] is False

    assert leaks(store) == [] and leaks(site) == []  # the members' canaries are in no stored or shown byte
    assert leaks(runs / "a" / "shared")  # ...though the results folders hold them


@pytest.mark.ray
@pytest.mark.slow
def test_board_add_keeps_every_runs_confirmatory_attempts(runs, tmp_path):
    """A results folder's ``hypothesis_attempts.jsonl`` reaches the store as one immutable file per attempt;
    adding it again writes nothing, another run's attempt adds one, and ``board check`` still passes."""
    first = copy_as_new_run(runs / "a", tmp_path / "a")
    entries = [{"hypothesis": "h1", "cells": "c1", "n_cells": 4, "L": 30.0, "p_value": 0.02, "n_blocks": 2},
               {"hypothesis": "h2", "cells": "c1", "n_cells": 4, "L": 31.0, "p_value": 0.5, "n_blocks": 2}]  # fmt: skip
    (first / "hypothesis_attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    store = tmp_path / "store"
    assert main(["board", "add", str(first), str(store)]) == 0
    assert Store(store).list("attempts") == ["attempts/h1/c1.json", "attempts/h2/c1.json"]
    before = snapshot(store)
    assert main(["board", "add", str(first), str(store)]) == 0 and snapshot(store) == before
    second = copy_as_new_run(runs / "a", tmp_path / "a2")
    (second / "hypothesis_attempts.jsonl").write_text(json.dumps(entries[0] | {"cells": "c2"}) + "\n")
    assert main(["board", "add", str(second), str(store)]) == 0
    assert len(Store(store).list("attempts/h1")) == 2
    assert main(["board", "check", str(store)]) == 0


@pytest.fixture
def scored_column(monkeypatch):
    """A column added in the one place columns are defined, the row schema: texts an attack scored."""
    from privauditor.orchestrator.report import row_schema

    column = row_schema.Column(
        "n_scored", lambda s: s.metrics["n_members"] + s.metrics["n_nonmembers"], "int", "attack"
    )
    monkeypatch.setattr(row_schema, "ROW", [*row_schema.ROW, column])
    return column.name


@pytest.mark.ray
@pytest.mark.slow
def test_a_column_added_to_the_row_schema_reaches_parquet_board_record_and_setting_rows(
    runs, tmp_path, scored_column
):
    import pyarrow as pa

    from privauditor.orchestrator.board.merge import setting_rows
    from privauditor.orchestrator.board.records import problems
    from privauditor.orchestrator.report.leaderboard import build

    folder = shutil.copytree(runs / "a", tmp_path / "a")
    build(folder)
    table = pq.read_table(folder / "leaderboard.parquet")
    assert table.column_names[-1] == scored_column and table.schema.field(scored_column).type == pa.int64()
    assert all(r[scored_column] == r["n_members"] + r["n_nonmembers"] == 16 for r in table.to_pylist())
    records = from_results(folder)
    assert records and all(problems(r) == [] for r in records)
    assert all(m[scored_column] == 16 for r in records for m in r["attacks"].values())
    settings = setting_rows(cell_rows(records))
    assert settings and all(s[scored_column] == 16 for s in settings)
    assert setting_columns()[-1] == scored_column


@pytest.mark.ray
@pytest.mark.slow
def test_a_conflicting_record_is_refused_and_concurrent_adds_lose_nothing(runs, tmp_path, capsys):
    store = tmp_path / "store"
    adds = [subprocess.Popen([sys.executable, "-m", "privauditor.orchestrator.cli", "board", "add", str(runs / n), str(store)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in ("a", "b")]  # fmt: skip
    assert [p.wait(timeout=300) for p in adds] == [0, 0], [p.stderr.read() for p in adds]
    expected = len(from_results(runs / "a")) + len(from_results(runs / "b"))
    records, problems = check(Store(store))
    assert len(records) == expected and problems == []
    # the same cell of the same run with other bytes: a conflict, refused in one line, the store untouched
    changed = shutil.copytree(runs / "a", tmp_path / "a-changed")
    (cell,) = [c for c in (changed / "cells").iterdir() if "__lora__" in c.name]
    metrics = json.loads((cell / "metrics.json").read_text())
    metrics["loss"]["auc"] = 0.5 + metrics["loss"]["auc"] / 4
    (cell / "metrics.json").write_text(json.dumps(metrics))
    before = snapshot(store)
    capsys.readouterr()
    assert main(["board", "add", str(changed), str(store)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and error.startswith("privauditor: error: conflict: record")
    assert error.count("records/") == 2 and snapshot(store) == before


def rewrite(store: Path, path: str, change) -> None:
    """Replace one record by a changed copy under its own content hash (what a bad writer could do)."""
    record = json.loads((store / path).read_text())
    change(record)
    (store / path).unlink()
    data = canonical(record)
    (store / path).with_name(f"{content_hash(data)}.json").write_bytes(data)


@pytest.mark.ray
@pytest.mark.slow
def test_check_refuses_per_sample_fields_missing_controls_and_raced_writers(runs, tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["board", "add", str(runs / "a"), f"file://{store}"]) == 0  # any pyarrow.fs URI
    assert main(["board", "check", str(store)]) == 0
    paths = Store(store).list("records")
    ok = snapshot(store)

    rewrite(store, paths[0], lambda r: r["attacks"]["loss"].update(sample_ids=["client-0001", "client-0002"]))
    capsys.readouterr()
    assert main(["board", "check", str(store)]) == 1
    assert "per-sample field attacks.loss.sample_ids" in capsys.readouterr().err
    assert main(["board", "build", str(store), "--out", str(tmp_path / "site")]) == 2
    assert not (tmp_path / "site").exists()

    shutil.rmtree(store / "records")
    assert main(["board", "add", str(runs / "a"), str(store)]) == 0 and snapshot(store) == ok
    none = next(p for p in paths if "__none__" in json.loads((store / p).read_text())["cell_id"])
    shutil.rmtree((store / none).parent)  # the base's record gone: the split has no `none` control
    capsys.readouterr()
    assert main(["board", "check", str(store)]) == 1
    assert "no `none` control" in capsys.readouterr().err
    missing = shutil.copytree(runs / "a", tmp_path / "a-no-none")
    shutil.rmtree(next((missing / "cells").glob("*__none__*")))
    assert main(["board", "add", str(missing), str(tmp_path / "other")]) == 2

    shutil.rmtree(store / "records")
    assert main(["board", "add", str(runs / "a"), str(store)]) == 0
    raced = store / paths[-1]  # two object-store writers of one key: both versions land, check finds them
    record = json.loads(raced.read_text())
    record["attacks"]["loss"]["auc"] = 1.0 - record["attacks"]["loss"]["auc"]
    data = canonical(record)
    (raced.parent / f"{content_hash(data)}.json").write_bytes(data)
    capsys.readouterr()
    assert main(["board", "check", f"file://{store}"]) == 1
    assert "conflict: 2 versions of one record" in capsys.readouterr().err


class Page(HTMLParser):
    """An HTML page's links, element ids and tables (rows of cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.links, self.ids, self.tables, self.in_cell = [], set(), [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.links += [attrs["href"]] if tag == "a" and "href" in attrs else []
        self.ids |= {attrs["id"]} if "id" in attrs else set()
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.tables[-1][-1].append("")
            self.in_cell = True

    def handle_endtag(self, tag):
        self.in_cell = self.in_cell and tag not in ("td", "th")

    def handle_data(self, data):
        if self.in_cell:
            self.tables[-1][-1][-1] += data


@pytest.mark.ray
@pytest.mark.slow
def test_release_history_site_links_and_wandb(runs, tmp_path, monkeypatch):
    store, site = tmp_path / "store", tmp_path / "site"
    assert main(["board", "add", str(runs / "a"), str(store)]) == 0
    assert main(["board", "release", str(store), "v1"]) == 0
    assert main(["board", "release", str(store), "v1"]) == 2  # a name is used once
    assert main(["board", "add", str(runs / "b"), str(store)]) == 0
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert (
        main(["board", "release", str(store), "v2", "--wandb-project", "board", "--wandb-dir", str(tmp_path)])
        == 0
    )
    correction = copy_as_new_run(runs / "b", tmp_path / "b-fixed")
    run_b = json.loads((runs / "b" / "privauditor.json").read_text())["run_id"]
    assert main(["board", "add", str(correction), str(store), "--supersedes", run_b]) == 0
    assert main(["board", "build", str(store), "--out", str(site)]) == 0

    pages = {}
    for path in site.rglob("*.html"):
        pages[path] = Page()
        pages[path].feed(path.read_text())
    for path, parsed in pages.items():  # every internal link resolves, anchors included
        for href in parsed.links:
            target, _, anchor = href.partition("#")
            resolved = (path.parent / target).resolve() if target else path
            assert resolved.is_file(), f"{path.name}: {href}"
            assert not anchor or anchor in pages[resolved].ids, f"{path.name}: {href}"
    assert {p.relative_to(site).as_posix() for p in pages} >= {
        "index.html",
        "history.html",
        "models/tiny-gpt2.html",
        "techniques/none.html",
        "techniques/lora.html",
        "techniques/head.html",
    }
    settings = pq.read_table(site / "settings.parquet").to_pylist()
    index = pages[site / "index.html"]
    ranking = next(t for t in index.tables if t and t[0][:2] == ["rank", "technique"])
    shown = {row[1]: float(row[3]) for row in ranking[1:]}
    assert set(shown) == {"lora", "head"} and (site / "cd.png").is_file()  # `none` is the control
    for technique in ("lora", "head"):  # the loss AUC at the last checkpoint, seeds averaged
        (last,) = [r for r in settings if r["technique"] == technique and r["last"] and r["attack"] == "loss"]
        assert shown[technique] == pytest.approx(last["auc"], abs=6e-4)
    # the settings table shows how many seeds and which ones, never the seed list alone (read as a count)
    table = next(t for t in index.tables if t and "seeds (which)" in t[0])
    column = table[0].index("seeds (which)")
    assert {row[column] for row in table[1:]} >= {
        f"{r['n_seeds']} ({r['seeds']})" for r in settings if r["last"]
    }

    history = (site / "history.html").read_text()
    v2 = history[history.index("<h2>v2</h2>") : history.index("<h2>v1</h2>")]
    new = Page()
    new.feed(v2[v2.index("<h3>New rows</h3>") :].split("<h3>", 2)[1])
    new_rows = {(row[1], row[3], row[4]) for row in new.tables[0][1:]}
    assert {("head", "2", "loss"), ("head", "1", "zlib")} <= new_rows and not any(
        r[0] == "lora" for r in new_rows
    )
    assert "<h3>Moved rows</h3>" in v2  # lora and none gained a seed
    unreleased = history[: history.index("<h2>v2</h2>")]
    assert f"{len(from_results(runs / 'b'))} records superseded" in unreleased
    manifest = json.loads((store / "releases" / "v2.json").read_text())
    assert manifest["previous"] == "v1" and manifest["counts"]["runs"] == 2

    (logged,) = (tmp_path / "wandb").rglob("*.wandb")  # the release's run, offline, with its artifact
    assert b"privauditor-board" in logged.read_bytes() and leaks(tmp_path / "wandb") == []
