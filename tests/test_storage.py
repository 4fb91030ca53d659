"""Results on an object store (through ``pyarrow.fs``): a finished cell is uploaded file by file with
``DONE`` last; an interrupted upload leaves no ``DONE``; the leaderboard is built from fetched summaries."""

from __future__ import annotations

import json

import pytest
import yaml

from privauditor.orchestrator.report.write import leaderboard
from privauditor.tasks.infra.files import write_json
from privauditor.tasks.infra.results import Results, check_results_dir
from privauditor.tasks.spec.config import cell_config


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "cache"))
    return Results.at(f"file://{tmp_path}/bucket/run")


def fake_cell(results, cell_id, auc):
    """A finished cell of two checkpoints: epoch 1 (under ``checkpoints/``) and epoch 2 (the folder), in a
    folder with its marker (``report`` reads only folders privauditor wrote)."""
    check_results_dir(results.root)
    results.upload("privauditor.json")
    folder = results.root / "cells" / cell_id
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    spec = cell_config({"model": "tiny-gpt2", "adaptation": "lora", "dataset": "sql"}).resolve(build=False)
    checkpoints = [
        {"epoch": 1, "step": 2, "best": False, "path": "checkpoints/step-2", "utility_loss": 5.5},
        {"epoch": 2, "step": 4, "best": True, "path": ".", "utility_loss": 5.0},
    ]
    record = {"cell_id": cell_id, "utility_loss": 5.0, "trainable_params": 3, "train": {"seconds": 1.0},
              "config": spec.to_dict(), "checkpoints": checkpoints}  # fmt: skip
    for checkpoint, value in zip(checkpoints, (auc - 0.05, auc), strict=True):
        write_json(folder / checkpoint["path"] / "signals.parquet", {})  # what the stage need not keep
        write_json(folder / checkpoint["path"] / "metrics.json", metrics(value))
    for name, data in (("cell.json", record), ("DONE", {"cell_id": cell_id})):
        write_json(folder / name, data)


def metrics(auc):
    return {
        "loss": {
            "auc": auc,
            "auc_ci": [auc - 0.1, auc + 0.1],
            "tpr_at_1pct_fpr": 0.0,
            "tpr_at_0.1pct_fpr": None,
            "n_members": 10,
            "n_nonmembers": 10,
            "roc": [[0, 0], [1, 1]],
        }
    }


def test_a_cell_is_uploaded_whole_with_done_last(results, tmp_path, monkeypatch):
    assert results.remote and results.root != tmp_path / "bucket" / "run"
    fake_cell(results, "c1", 0.7)
    uploads = []
    original = Results.upload
    monkeypatch.setattr(Results, "upload", lambda self, rel: (uploads.append(rel), original(self, rel)))
    assert not results.done("c1")
    results.push_cell("c1")
    assert uploads[-1] == "cells/c1/DONE" and len(uploads) == len(set(uploads)) == 7
    remote = tmp_path / "bucket" / "run" / "cells" / "c1"
    assert (remote / "adapter" / "adapter_model.safetensors").read_bytes() == b"weights"
    assert results.done("c1")


def test_an_interrupted_upload_leaves_no_done(results, monkeypatch):
    fake_cell(results, "c2", 0.6)
    original, calls = Results.upload, []

    def flaky(self, relative):
        calls.append(relative)
        if len(calls) == 3:
            raise OSError("connection reset")
        original(self, relative)

    monkeypatch.setattr(Results, "upload", flaky)
    with pytest.raises(OSError):
        results.push_cell("c2")
    assert not results.done("c2")  # a rerun redoes the cell; nothing half-uploaded is read


def test_leaderboard_from_cells_finished_on_other_nodes(results, tmp_path, monkeypatch):
    fake_cell(results, "c3", 0.8)
    results.push_cell("c3")
    stage = results.root / "cells" / "c3"
    kept = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
    assert kept == ["DONE", "cell.json", "checkpoints/step-2/metrics.json", "metrics.json"]
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "other-cache"))
    elsewhere = Results.at(results.uri)  # another node: an empty stage of its own
    assert elsewhere.root != results.root and not (elsewhere.root / "cells").exists()
    found = leaderboard(elsewhere)
    assert [(r["cell_id"], r["epoch"], r["auc"], r["best"]) for r in found] == [
        ("c3", 1, 0.75, False),
        ("c3", 2, 0.8, True),
    ]
    remote = tmp_path / "bucket" / "run"
    assert json.loads((remote / "cells" / "c3" / "DONE").read_text())["cell_id"] == "c3"
    assert (remote / "leaderboard.parquet").stat().st_size > 0 and (remote / "leaderboard.html").exists()
    assert not (elsewhere.root / "cells" / "c3" / "adapter").exists()  # only the summaries were fetched


def test_report_against_a_folder_on_an_object_store(results, tmp_path, monkeypatch, capsys):
    """``report --against`` takes an object-store URI as ``report`` does: its summaries are fetched into a
    stage and nothing is written to it; the same folder given twice (a trailing slash aside) is refused."""
    from privauditor.orchestrator.cli import main

    fake_cell(results, "tiny-gpt2__lora__sql__s0__a1", 0.7)  # ids as a cell names itself: findings reads them
    results.push_cell("tiny-gpt2__lora__sql__s0__a1")
    remote = tmp_path / "bucket" / "run"
    before = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*"))
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(tmp_path / "other-cache"))  # another machine: empty stage
    here = Results.at(tmp_path / "here")
    fake_cell(here, "tiny-gpt2__lora__sql__s0__b2", 0.6)
    assert main(["report", str(here.root), "--against", results.uri]) == 0
    assert "## Against run" in (here.root / "findings.md").read_text()
    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*")) == before
    capsys.readouterr()
    assert main(["report", results.uri, "--against", results.uri + "/"]) == 2
    assert "is the results folder itself" in capsys.readouterr().err
    old = tmp_path / "bucket" / "old"  # a folder of another results format, named by its URI
    (old / "cells").mkdir(parents=True)
    write_json(old / "privauditor.json", {"results_format": 0})
    assert main(["report", str(here.root), "--against", f"file://{old}"]) == 2
    assert f"error: --against file://{old} holds results format 0," in capsys.readouterr().err


def test_a_results_folder_refuses_to_mix_writers_and_sweep_settings(tmp_path, capsys):
    """A folder records what wrote it: another sweep spec (a ``--set``), a cell run one at a time into a
    sweep's folder, or an audit into it, is one line and leaves the folder as it was; ``--add-spec`` keeps
    a second spec on purpose, and adding seeds to a sweep is the same sweep."""
    from privauditor.orchestrator.cli import main
    from privauditor.orchestrator.sweepfile.sweep import find_sweep, load_sweep, parse_sweep
    from privauditor.tasks.infra.results import Results

    out = tmp_path / "results"
    sweep = load_sweep("smoke")
    Results.open_for_writing(out, sweep.writer())
    marker = (out / "privauditor.json").read_text()
    assert json.loads(marker)["written_by"] == [sweep.writer()]
    data = yaml.safe_load(find_sweep("smoke").read_text())
    more = data | {"seeds": [0, 1], "matrix": data["matrix"] | {"dataset": ["finance", "sql"]}}
    assert parse_sweep(more, "smoke").writer() == sweep.writer()  # more cells: the same sweep
    assert parse_sweep(data | {"train": {"epochs": 2}}, "smoke").writer() != sweep.writer()
    for argv, fragment in [
        (["run", "smoke", "--out", str(out), "--set", "train.epochs=2"], "holds sweep 'smoke' (settings"),
        (["run", "quick", "--out", str(out)], "not 'quick'"),
        (["cell", "--model", "tiny-gpt2", "--adaptation", "none", "--dataset", "finance", "--out", str(out)],
         "holds a sweep's cells; cells run one at a time"),
    ]:  # fmt: skip
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and fragment in err, err
        assert (out / "privauditor.json").read_text() == marker
    other = load_sweep("smoke", ["train.epochs=2"])
    Results.open_for_writing(out, other.writer(), add=True)
    assert json.loads((out / "privauditor.json").read_text())["written_by"] == [
        sweep.writer(),
        other.writer(),
    ]
    Results.open_for_writing(out, other.writer())  # a spec the folder holds: accepted as it is
    old = tmp_path / "old"  # a marker of an earlier release names no writer: any writer is accepted
    write_json(old / "privauditor.json", {"results_format": 5, "run_id": "x"})
    Results.open_for_writing(old, sweep.writer())
    assert "written_by" not in json.loads((old / "privauditor.json").read_text())
