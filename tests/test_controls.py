"""Controls: the model-free ``blind`` attack and its label-permutation test of a split's shift."""

from __future__ import annotations

import json

import numpy as np
import pytest
from faker import Faker

from privauditor.tasks.attacks import build_attack
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.views.blind import METADATA, shift_test

LABELS = np.r_[np.ones(64, bool), np.zeros(64, bool)]


def loan_requests(n, seed, names="en_US"):
    """Finance-like records; the applicant's name is drawn from the locale ``names``. (How small a shift
    the test can see depends on the shifted field's share of the text: with three random jargon words
    added to each record, the same name shift is flagged on one seed of three.)"""
    people = Faker(names, use_weighting=False)
    people.seed_instance(seed + 7)
    rng = np.random.default_rng(seed)
    purposes = ["debt consolidation", "a car", "home repairs"]
    return [
        f"Loan request from {people.first_name()} {people.last_name()}: ${rng.integers(5, 90)},000 for "
        f"{rng.choice(purposes)}, annual income ${rng.integers(30, 300)},000, credit score {rng.integers(550, 820)}."
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_permutation_test_flags_a_subtly_shifted_split_and_not_an_iid_one(seed):
    """Non-members whose one field (the name) comes from another Faker locale are flagged; members and
    non-members drawn alike are not; the pooled out-of-fold AUC under the null sits below 0.5."""
    members = loan_requests(64, seed)
    iid = shift_test(members + loan_requests(64, seed + 100), LABELS, 5, 100, 1.0, seed)
    shifted = shift_test(members + loan_requests(64, seed + 100, "de_DE"), LABELS, 5, 100, 1.0, seed)
    assert shifted["p_value"] < 0.05 and shifted["auc"] > 0.6
    assert iid["p_value"] > 0.05
    assert iid["null_auc_mean"] < 0.5 and shifted["permutations"] == 100


def test_blind_runs_once_per_split_and_scores_every_cell_alike(tmp_path):
    sizes = ["split.members=16", "split.nonmembers=16", "split.validation=4", "train.max_length=48",
             "train.epochs=1", "attacks=[loss,blind]", "attack_params.blind.permutations=20"]  # fmt: skip
    outcomes = [
        run_cell(cell_config({"model": "tiny-gpt2", "adaptation": a, "dataset": "sql"}, sizes), tmp_path)
        for a in ("none", "lora")
    ]
    (stored,) = (tmp_path / "shared" / "views" / "blind").glob("*.parquet")
    import pyarrow.parquet as pq

    found = json.loads(pq.read_schema(stored).metadata[METADATA])
    assert 0 < found["p_value"] <= 1 and found["permutations"] == 20
    blind = [json.loads((o.path / "metrics.json").read_text())["blind"]["auc"] for o in outcomes]
    assert blind[0] == blind[1] == pytest.approx(found["auc"])
    assert str(build_attack("blind").cost()) == "0 fwd"  # model-free


def test_the_shift_test_reads_a_seeded_subsample_of_large_parts(monkeypatch):
    """Above TESTED records a side the permutations run on a seeded subsample (each a cross-validation:
    their cost stays flat as files grow), while every record still gets its out-of-fold score."""
    from privauditor.tasks.views import blind

    members = loan_requests(64, 0)
    whole = shift_test(members + loan_requests(64, 100, "de_DE"), LABELS, 5, 50, 1.0, 0)
    monkeypatch.setattr(blind, "TESTED", 40)
    part = shift_test(members + loan_requests(64, 100, "de_DE"), LABELS, 5, 50, 1.0, 0)
    assert whole["tested"] == 128 and part["tested"] == 80
    assert np.array_equal(part["scores"], whole["scores"]) and len(part["scores"]) == 128
    assert part["auc"] != whole["auc"] and 1 / 51 <= part["p_value"] <= 1  # a test of the 80 it read
    again = shift_test(members + loan_requests(64, 100, "de_DE"), LABELS, 5, 50, 1.0, 0)
    assert {k: v for k, v in again.items() if k != "scores"} == {
        k: v for k, v in part.items() if k != "scores"
    }
