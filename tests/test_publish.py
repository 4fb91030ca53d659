"""``privauditor publish``: the public export holds aggregates only; canaries planted in the members
appear in no exported byte, nor in the W&B offline files."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.report.row_schema import columns
from privauditor.orchestrator.sweepfile.sweep import WandbSettings
from privauditor.orchestrator.tracking import log_cell, log_leaderboard
from privauditor.tasks.infra.results import checkpoint_results

CANARY = "QZXV{:03d}CANARY"


def canary_file(path, n=40):
    """Records whose every target carries its own canary (and so does every sample id)."""
    lines = [
        json.dumps({"id": f"client-{CANARY.format(i)}", "prompt": "Summarise the client record.\n",
                    "target": f"Client {CANARY.format(i)} owes ${1000 + 37 * i} on account {i:05d}."})
        for i in range(n)
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def leaks(folder, marker=b"CANARY"):
    """Files at or under ``folder`` whose bytes, or whose Parquet tables' values, contain ``marker``."""
    found = []
    for file in [folder] if folder.is_file() else (p for p in folder.rglob("*") if p.is_file()):
        data = file.read_bytes()
        if file.suffix == ".parquet":
            data += json.dumps(pq.read_table(file).to_pylist(), default=str).encode()
        if marker in data or marker.decode().encode("utf-16-le") in data:
            found.append(file)
    return found


def test_published_folder_and_wandb_files_hold_no_sample_text(tmp_path, monkeypatch, capsys):
    for name in ("WANDB_API_KEY", "HF_TOKEN"):  # secrets in the environment are never written anywhere
        monkeypatch.setenv(name, f"{name}-SECRET-0123456789abcdef")
    data = canary_file(tmp_path / "clients.jsonl")
    out, public = tmp_path / "results", tmp_path / "public"
    sizes = [
        "split.members=12",
        "split.nonmembers=12",
        "split.validation=4",
        "attacks=[loss,zlib,min_k_pp]",
        "split.canaries={count: 1, repeats: [3], digits: 2}",
    ]  # canaries' text must not travel either
    argv = ["cell", "--model", "tiny-gpt2", "--adaptation", "lora", "--dataset", str(data), "--out", str(out)]
    assert main(argv + [f"--set={s}" for s in sizes] + ["--set=train.epochs=1"]) == 0
    (cell_dir,) = (out / "cells").glob("*/")
    assert leaks(tmp_path / "clients.jsonl") and leaks(out / "shared")  # the search finds what is there
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    record = json.loads((cell_dir / "cell.json").read_text())
    settings = WandbSettings(mode="offline", project="canary")
    log_cell(settings, "canary", out, record, checkpoint_results(cell_dir))
    from privauditor.orchestrator.report.leaderboard import build

    log_leaderboard(settings, "canary", out, build(out))
    assert main(["publish", str(out), "--to", str(public), "--wandb-project", "canary-public"]) == 0

    exported = sorted(p.relative_to(public).as_posix() for p in public.rglob("*") if p.is_file())
    assert {"leaderboard.parquet", "leaderboard.csv", "leaderboard.md", "leaderboard.html", "provenance.json",
            "published.json", f"plots/{cell_dir.name}.png"} <= set(exported)  # fmt: skip
    assert any(p.startswith("wandb/") for p in exported)
    assert leaks(public) == [] and leaks(out / "wandb") == []
    assert (
        leaks(public, b"The account number of") == [] and leaks(out / "wandb", b"The account number of") == []
    )
    assert leaks(out, b"SECRET-0123456789abcdef") == [] and leaks(public, b"SECRET-0123456789abcdef") == []
    table = pq.read_table(public / "leaderboard.parquet")
    assert table.column_names == columns() and table.num_rows == 3
    assert table.column("exposure_repeats").to_pylist() == [
        3,
        3,
        3,
    ]  # the canary's exposure travels, as a number
    provenance = json.loads((public / "provenance.json").read_text())["cells"][cell_dir.name]
    assert "runtime" not in provenance and provenance["provenance"]["split"]

    # publishing again replaces the export with the same bytes; a folder that is not an export is never
    # overwritten
    def files(folder):
        return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    first = {p: data for p, data in files(public).items() if p.parts[0] != "wandb"}
    assert main(["publish", str(out), "--to", str(public)]) == 0 and not (public / "wandb").exists()
    assert files(public) == first
    capsys.readouterr()
    assert main(["publish", str(out), "--to", str(out / "cells")]) == 2
    assert "not an earlier publish folder" in capsys.readouterr().err
    assert (cell_dir / "DONE").exists()
