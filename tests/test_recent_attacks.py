"""The attacks after 2023 in real cells: the views they read (prefixes, lowercased texts, corpus
frequencies, a population), their contract (one finite score per scored sample), and the leak they find
on a canary cell against chance on the un-adapted base."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from privauditor.tasks.attacks import build_attack
from privauditor.tasks.cell import run_cell
from privauditor.tasks.config import cell_config
from privauditor.tasks.errors import PrivauditorError

RECENT = ["lowercase", "recall", "con_recall", "dc_pdd", "surp", "rmia"]
PARTS = "split={members: 16, nonmembers: 16, validation: 8, population: 24, known_members: 12}"


def cell(out, model, adaptation, *assignments, seed=0):
    settings = {"model": model, "adaptation": adaptation, "dataset": "finance", "seed": seed}
    return run_cell(cell_config(settings, [PARTS, f"attacks=[loss,{','.join(RECENT)}]", *assignments]), out)


def test_recent_attacks_find_the_canary_and_nothing_on_the_base(tmp_path, seed):
    """Full fine-tuning, 80 epochs, 16 members (the canary of test_cell): every recent attack's AUC CI lies
    above 0.5. The un-adapted base on the same split: every CI contains 0.5."""
    canary = cell(tmp_path / "canary", "tiny-gpt2", "full", "train.epochs=80", "train.lr=0.003", seed=seed)
    base = cell(tmp_path / "base", "tiny-gpt2", "none", seed=seed)
    for name in ["loss", *RECENT]:
        low, high = canary.metrics[name]["auc_ci"]
        assert low > 0.5, (name, canary.metrics[name]["auc"], low)
        low, high = base.metrics[name]["auc_ci"]
        assert low <= 0.5 <= high, (name, base.metrics[name]["auc"])
    scores = pq.read_table(canary.path / "scores.parquet").to_pylist()
    for name in RECENT:
        rows = [r for r in scores if r["attack"] == name]
        assert len(rows) == 32 == len({r["sample_id"] for r in rows})
        assert all(math.isfinite(r["score"]) for r in rows), name


def test_prefix_views_keep_the_target_positions_and_record_the_shots(tmp_path):
    """The conditioned view scores exactly the target tokens the signals view scores; a prefix too long for
    the context loses shots from its front, and the count kept is stored."""
    outcome = cell(tmp_path, "tiny-llama", "lora", "train.epochs=1", "attack_params.recall.shots=400")
    (table,) = [
        pq.read_table(p)
        for p in (outcome.path / "views" / "conditioned").glob("*.parquet")
        if json.loads(pq.read_table(p).schema.metadata[b"privauditor.view_key"])["params"]["shots"] == 400
    ]
    kept = int(table.schema.metadata[b"privauditor.shots"])
    assert 0 < kept < 24  # the population has 24; 400 were asked; the context (1,024 positions) holds fewer
    assert np.isfinite(table.column("conditioned_nll").to_numpy()).all()


def test_parts_the_recent_attacks_need_are_checked_up_front():
    base = {"model": "tiny-llama", "adaptation": "lora", "dataset": "finance"}
    with pytest.raises(PrivauditorError, match="split.known_members > 0"):
        cell_config(base, ["split.population=8", "attacks=[con_recall]"]).check()
    with pytest.raises(PrivauditorError, match="split.population > 0"):
        cell_config(base, ["attacks=[rmia]"]).check()
    with pytest.raises(PrivauditorError, match="shots must be a positive int"):
        build_attack("recall", {"shots": 0})
