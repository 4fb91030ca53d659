"""The attacks after 2023 in real cells: the views they read (prefixes, lowercased texts, corpus
frequencies, a population), their contract (one finite score per scored sample), and the leak they find
on a canary cell against chance on the un-adapted base."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from privauditor.tasks.attacks import build_attack
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import cell_config

#: the attacks after 2023 that read a model (lt_iqr, which reads a trajectory: tests/test_checkpoints.py)
RECENT = ["lowercase", "recall", "con_recall", "dc_pdd", "surp", "rmia", "spv_mia", "wbc", "ezmia_degenerate_one",
          "gap_k", "camia", "informia"]  # fmt: skip
#: run in the same cells, but not held to finding the canary: EZ-MIA at its authors' rule scores the canary's
#: memorised (degenerate) members 0, last (test_ezmia_at_its_authors_rule_ranks_the_canary_s_memorised_last)
AUTHORS_RULE = ["ezmia"]
PARTS = "split={members: 16, nonmembers: 16, validation: 8, population: 24, known_members: 20}"
#: The canary's split: 32 a side. At 16 a side Con-ReCaLL's interval is too wide for its effect on these
#: bases (which barely copy from context): on one fast tiny-gpt2 base, seeds 0-4 gave AUC 0.71 (95 % CI
#: from 0.48), 0.95, 0.75, 1.0, 0.97; at 32 a side 1.0, 1.0, 0.80 (from 0.68), 1.0, 1.0. The base is
#: checked at 16 a side: its interval is a bootstrap over the scored records and does not see how much
#: one split draw differs from another on records that share templates. At 32 a side the same base's
#: loss AUC ran from 0.38 to 0.69 over seeds 0-4 and three of the five draws had an attack whose interval
#: left out 0.5; at 16 a side every draw's intervals held it.
CANARY_PARTS = PARTS.replace("members: 16, nonmembers: 16", "members: 32, nonmembers: 32")


def cell(out, model, adaptation, *assignments, seed=0, parts=PARTS):
    settings = {"model": model, "adaptation": adaptation, "dataset": "finance", "seed": seed}
    attacks = ",".join(["loss", *RECENT, *AUTHORS_RULE])
    return run_cell(cell_config(settings, [parts, f"attacks=[{attacks}]", *assignments]), out)


@pytest.fixture(scope="module")
def canary_and_base(tmp_path_factory):
    """Full fine-tuning, 80 epochs (test_cell's canary recipe) on 32 members a side, and the un-adapted base
    on 16 a side (see CANARY_PARTS), with 12 known members so both of Con-ReCaLL's prefixes have 12
    records."""
    seed = int(os.environ.get("PRIVAUDITOR_TEST_SEED", "0"))
    out = tmp_path_factory.mktemp("recent")
    canary = cell(out / "canary", "tiny-gpt2", "full", "train.epochs=80", "train.lr=0.003", seed=seed,
                  parts=CANARY_PARTS)  # fmt: skip
    return canary, cell(out / "base", "tiny-gpt2", "none", seed=seed)


def interval(cell, name):
    """The attack's AUC interval at 1 - 0.05 / m, m the attacks this test checks (Bonferroni): the same
    seeded, stratified bootstrap as ``metrics.json``'s 95 % one, from the cell's scores."""
    from privauditor.tasks.stats.metrics import bootstrap_auc_ci

    rows = [r for r in pq.read_table(cell.path / "scores.parquet").to_pylist() if r["attack"] == name]
    member = np.array([r["member"] for r in rows])
    score = np.array([r["score"] for r in rows])
    return bootstrap_auc_ci(member, score, 1000, 0, level=1 - 0.05 / (1 + len(RECENT)))


@pytest.mark.parametrize("name", ["loss", *RECENT])
def test_recent_attacks_find_the_canary_and_nothing_on_the_base(canary_and_base, name):
    canary, base = canary_and_base
    low, high = canary.metrics[name]["auc_ci"]
    assert low > 0.5 and interval(canary, name)[0] > 0.5, (name, canary.metrics[name]["auc"], low)
    if "skipped" in base.metrics[name]:  # an attack that abstains on every text of the base
        assert name == "surp" and base.metrics[name]["abstained"] == 32
    else:
        low, high = interval(base, name)
        assert low <= 0.5 <= high, (name, base.metrics[name]["auc"])
    scores = pq.read_table(canary.path / "scores.parquet").to_pylist()
    rows = [r for r in scores if r["attack"] == name]
    assert len(rows) == 64 == len({r["sample_id"] for r in rows})
    assert all(math.isfinite(r["score"]) for r in rows)


def test_ezmia_at_its_authors_rule_ranks_the_canary_s_memorised_last(canary_and_base):
    """The two EZ-MIA rules differ only on degenerate texts: on the canary, where most members are
    degenerate, the authors' 0 (``ezmia``) ranks them last and the variant's 1 first."""
    canary, _ = canary_and_base
    zero, one = canary.metrics["ezmia"], canary.metrics["ezmia_degenerate_one"]
    assert zero["degenerate"] == one["degenerate"] and zero["degenerate_members"] > zero["degenerate"] / 2
    assert zero["auc"] < one["auc"]


def test_con_recall_keeps_the_gamma_it_chose_on_held_out_texts(canary_and_base):
    """γ comes from the grid, chosen on the 8 known members and 12 population records past the prefixes."""
    from privauditor.tasks.attacks.con_recall import GRID

    canary, base = canary_and_base
    assert canary.metrics["con_recall"]["gamma"] in GRID and base.metrics["con_recall"]["gamma"] in GRID
    views = [pq.read_table(p) for p in (canary.path / "views" / "conditioned").glob("*.parquet")]
    held = [t for t in views if "member" in t.column_names]
    assert len(held) == 2 and all(t.num_rows == 8 + 12 for t in held)
    assert all(sum(t.column("member").to_pylist()) == 8 for t in held)


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
    with pytest.raises(PrivauditorError, match="split.known_members > 0"):  # to choose its a
        cell_config(base, ["split.population=8", "attacks=[rmia]"]).check()
    cell_config(base, ["split.population=8", "attacks=[rmia]", "attack_params.rmia.a=0.3"]).check()
    with pytest.raises(PrivauditorError, match="split.known_members > 0"):  # its signs
        cell_config(base, ["split.population=8", "attacks=[camia]"]).check()
    with pytest.raises(PrivauditorError, match="split.known_members > 12"):  # its held-out texts
        cell_config(base, ["split={population: 20, known_members: 12}", "attacks=[con_recall]"]).check()
    cell_config(base, ["split={population: 20, known_members: 12}", "attacks=[con_recall]",
                       "attack_params.con_recall.gamma=1.0"]).check()  # fmt: skip
    with pytest.raises(PrivauditorError, match="shots must be a positive int"):
        build_attack("recall", {"shots": 0})
