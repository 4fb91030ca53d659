"""Determinism: the same cell and seed, run twice on the same machine, give identical bytes of scores."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from privauditor.orchestrator.cli import main

SETTINGS = ["split.members=12", "split.nonmembers=12", "split.validation=4", "train.epochs=2",
            "train.max_length=64", "attack_params.neighbourhood.k=2", "score.bootstrap=50"]  # fmt: skip


def run(out):
    argv = ["cell", "--model", "tiny-llama", "--adaptation", "lora", "--dataset", "sql", "--seed", "3"]
    assert main(argv + ["--out", str(out)] + [f"--set={s}" for s in SETTINGS]) == 0
    (cell,) = (out / "cells").glob("*/")
    return cell


def test_same_cell_same_seed_gives_identical_scores(tmp_path):
    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    assert first.name == second.name
    for name in ("signals.parquet", "scores.parquet"):
        assert pq.read_table(first / name).equals(pq.read_table(second / name)), name
    scores = pq.read_table(first / "scores.parquet")
    assert set(scores.column("attack").to_pylist()) == {
        "loss", "reference", "zlib", "neighbourhood", "min_k", "min_k_pp", "gradnorm"
    }  # fmt: skip
    assert (first / "metrics.json").read_text() == (second / "metrics.json").read_text()
    records = [json.loads((c / "cell.json").read_text()) for c in (first, second)]
    assert records[0]["provenance"] == records[1]["provenance"]  # split and adapter hashes
    assert records[0]["train"]["epoch_losses"] == records[1]["train"]["epoch_losses"]
