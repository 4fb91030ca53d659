"""Training trajectories: one training pass, snapshotted at ``train.checkpoints``, audited afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from privauditor.orchestrator.report.leaderboard import rows
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.training.loop import checkpoint_steps, warmup_then_constant

SMALL = ["split.members=12", "split.nonmembers=12", "split.validation=8", "train.max_length=48",
         "train.batch_size=4", "attacks=[loss,zlib,neighbourhood]", "attack_params.neighbourhood.k=2"]  # fmt: skip


def cell(out, *assignments, adaptation="lora", seed=0):
    settings = {"model": "tiny-gpt2", "adaptation": adaptation, "dataset": "finance", "seed": seed}
    return run_cell(cell_config(settings, [*SMALL, *assignments]), out)


def scores(folder, attacks=("loss", "zlib", "neighbourhood")):
    table = pq.read_table(folder / "scores.parquet").to_pylist()
    return sorted((r["attack"], r["sample_id"], r["score"]) for r in table if r["attack"] in attacks)


def test_snapshots_of_one_pass_are_the_runs_of_fewer_epochs(tmp_path, seed):
    """The snapshot after epoch e scores exactly as an e-epoch run with the same seed: the schedule does not
    depend on the budget, and auditing never touches the training."""
    trajectory = cell(tmp_path / "a", "train.checkpoints=[1,3]", seed=seed)
    record = json.loads((trajectory.path / "cell.json").read_text())
    steps_per_epoch = 12 // 4
    assert [(c["epoch"], c["step"]) for c in record["checkpoints"]] == [(1, steps_per_epoch), (3, 9)]
    assert record["train"]["steps"] == 3 * steps_per_epoch and record["train"]["epochs"] == 3
    assert [c["path"] for c in record["checkpoints"]] == [f"checkpoints/step-{steps_per_epoch}", "."]
    early = trajectory.path / "checkpoints" / f"step-{steps_per_epoch}"
    for epochs, folder in ((1, early), (3, trajectory.path)):
        alone = cell(tmp_path / f"e{epochs}", f"train.epochs={epochs}", seed=seed)
        assert scores(folder) == scores(alone.path, {a for a, _, _ in scores(folder)})
        alone_record = json.loads((alone.path / "cell.json").read_text())
        assert (
            alone_record["utility_loss"]
            == next(c for c in record["checkpoints"] if c["epoch"] == epochs)["utility_loss"]
        )
    # the snapshots differ from each other (training moved the weights between them)
    assert scores(early) != scores(trajectory.path)
    assert not (trajectory.path / ".snapshots").exists()


def test_costly_attacks_run_at_the_last_and_the_best_checkpoint_only(tmp_path):
    outcome = cell(tmp_path, "train.checkpoints=[0,1,2]", "train.lr=3e-2")
    record = json.loads((outcome.path / "cell.json").read_text())
    utilities = {c["epoch"]: c["utility_loss"] for c in record["checkpoints"]}
    best = min(utilities, key=lambda e: (utilities[e], e))
    assert [c["best"] for c in record["checkpoints"]] == [e == best for e in (0, 1, 2)]
    for checkpoint in record["checkpoints"]:
        metrics = json.loads((outcome.path / checkpoint["path"] / "metrics.json").read_text())
        costly = checkpoint["epoch"] in (2, best)
        expected = {"loss", "zlib"} | ({"neighbourhood"} if costly else set())
        assert set(metrics) == set(checkpoint["attacks"]) == expected
    # epoch 0 is the technique applied, nothing trained: LoRA starts as the base itself
    assert record["checkpoints"][0]["step"] == 0
    table = rows(tmp_path)
    assert {(r["epoch"], r["attack"]) for r in table} == {
        (c["epoch"], a) for c in record["checkpoints"] for a in c["attacks"]
    }
    assert {r["epoch"]: r["utility_loss"] for r in table} == utilities
    assert {r["epoch"] for r in table if r["best"]} == {best}
    plan_ran_the_cell(outcome.path, record)


def plan_ran_the_cell(cell_dir, record):
    """The cell did what its plan says, in a process without torch: the attacks per checkpoint, an
    adapter saved where the plan saves one, every view file in the store the plan names, and every timed
    stage under a label the plan has."""
    code = (
        "import json, sys; from privauditor.tasks.spec.resolved import CellSpec; "
        "from privauditor.tasks.cell.plan import plan_cell; "
        "record = json.load(open(sys.argv[1])); "
        "best = [c['best'] for c in record['checkpoints']].index(True); "
        "plan = plan_cell(CellSpec.from_dict(record['config']), best=best); "
        "assert 'torch' not in sys.modules, 'the plan imported torch'; "
        "print(json.dumps({'stages': plan.stages, 'checkpoints': [{'runs': c.runs, 'saves': c.saves, "
        "'views': {s.view.name: s.shared for s in c.views}, 'labels': [s.label for s in c.views]} "
        "for c in plan.checkpoints]}))"
    )
    found = subprocess.run([sys.executable, "-c", code, str(cell_dir / "cell.json")], capture_output=True,
                           text=True, check=True)  # fmt: skip
    plan = json.loads(found.stdout)
    labels = set(plan["stages"])
    for planned, checkpoint in zip(plan["checkpoints"], record["checkpoints"], strict=True):
        assert planned["runs"] == checkpoint["attacks"]
        assert planned["saves"] == (cell_dir / checkpoint["path"] / "adapter").is_dir()
        for attack, files in checkpoint["views"].items():
            for file in files.values():
                view = file.split("/views/")[1].split("/")[0]
                assert planned["views"][view] == file.startswith("shared/"), (attack, file)
        labels |= set(planned["labels"])
    assert set(record["timings"]) <= labels, set(record["timings"]) - labels


def test_the_base_has_one_checkpoint_at_epoch_zero_whatever_the_sweep_trains(tmp_path):
    outcome = cell(tmp_path, "train.checkpoints=[1,2]", "attacks=[loss]", adaptation="none")
    record = json.loads((outcome.path / "cell.json").read_text())
    assert [(c["epoch"], c["step"], c["best"], c["path"]) for c in record["checkpoints"]] == [
        (0, 0, True, ".")
    ]
    assert record["config"]["train"]["checkpoints"] == [0]


def test_checkpoints_inside_an_epoch_are_named_by_their_step(tmp_path):
    """A fraction of an epoch is a snapshot inside it (after round-half-up of its share of the steps), and
    its audit matches a run stopped there: the schedule does not depend on the budget within an epoch
    either (12 members, batch 4: 3 steps per epoch, so 1/3 of an epoch is step 1 and 0.5 is step 2)."""
    outcome = cell(tmp_path / "a", "train.checkpoints=[0,0.5,1,2]", "attacks=[loss]")
    record = json.loads((outcome.path / "cell.json").read_text())
    assert [(c["epoch"], c["step"]) for c in record["checkpoints"]] == [(0, 0), (0.5, 2), (1, 3), (2, 6)]
    assert [c["path"] for c in record["checkpoints"]][:3] == ["checkpoints/step-0", "checkpoints/step-2",
                                                             "checkpoints/step-3"]  # fmt: skip
    assert record["config"]["train"]["checkpoints"] == [0, 0.5, 1, 2]  # whole epochs stay ints in the id
    table = {(r["epoch"], r["step"]) for r in rows(tmp_path / "a")}
    assert table == {(0, 0), (0.5, 2), (1, 3), (2, 6)}
    early = scores(outcome.path / "checkpoints" / "step-2", {"loss"})
    assert early != scores(outcome.path / "checkpoints" / "step-3", {"loss"})


def test_checkpoint_steps_round_half_up_and_refuse_a_shared_step():
    assert checkpoint_steps([0, 0.25, 0.5, 1, 2, 4], 35) == {0: 0, 9: 0.25, 18: 0.5, 35: 1, 70: 2, 140: 4}
    assert checkpoint_steps([0.5, 1], 3) == {2: 0.5, 3: 1}  # 1.5 rounds up
    with pytest.raises(PrivauditorError, match=r"0.25 and 0.3 fall on the same step \(1 of 3 per epoch\)"):
        checkpoint_steps([0.25, 0.3, 1], 3)
    with pytest.raises(PrivauditorError, match="0 and 0.1 fall on the same step"):
        checkpoint_steps([0.1, 1], 3)


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        (["train.checkpoints=[0.5,1.5]"], "must be a whole number of epochs: it is train.epochs"),
        (
            ["train.epochs=3", "train.checkpoints=[1,2]"],
            "train.epochs (3) must be the last of train.checkpoints",
        ),
        (["train.checkpoints=[2,1]"], "train.checkpoints must be epochs from 0 up in ascending order"),
        (["train.checkpoints=[]"], "train.checkpoints must be epochs from 0 up in ascending order"),
        (["train.checkpoints=[-1,2]"], "train.checkpoints must be epochs from 0 up in ascending order"),
    ],
)
def test_checkpoints_that_cannot_be_are_one_line_errors(assignments, message):
    settings = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance"}
    with pytest.raises(PrivauditorError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        cell_config(settings, assignments)
    assert "\n" not in str(error.value)


def test_setting_one_of_epochs_and_checkpoints_sets_the_other():
    settings = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance"}
    train = cell_config(settings, ["train.checkpoints=[1,4]"]).resolve().train
    assert (train.epochs, train.checkpoints) == (4, (1, 4))
    train = cell_config(settings, ["train.epochs=2"]).resolve().train
    assert (train.epochs, train.checkpoints) == (2, (2,))


def test_the_rate_warms_up_then_stays_whatever_the_budget():
    factor = warmup_then_constant(4)
    assert [factor(s) for s in range(7)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0]


def test_the_initial_state_of_a_technique_that_starts_as_the_base_is_scored_as_the_base(tmp_path):
    """LoRA's B starts at zero, so its step-0 model is the base logit for logit: that checkpoint reads the
    split's shared signals (no pass of its own, no adapter saved) and scores exactly as `none` does."""
    base = cell(tmp_path, "train.checkpoints=[0,1,2]", "attacks=[loss,zlib]", adaptation="none")
    lora = cell(tmp_path, "train.checkpoints=[0,1,2]", "attacks=[loss,zlib]")
    record = json.loads((lora.path / "cell.json").read_text())
    start = record["checkpoints"][0]
    assert (start["step"], start["adaptation_hash"]) == (0, "none")
    assert not (lora.path / start["path"] / "adapter").exists() and (lora.path / "adapter").is_dir()
    assert {path for views in start["views"].values() for path in views.values()} == set(
        json.loads((base.path / "cell.json").read_text())["views"]["loss"].values()
    )  # the base's own signals file, under shared/
    assert scores(lora.path / start["path"], {"loss", "zlib"}) == scores(base.path, {"loss", "zlib"})
    prompt = cell(tmp_path, "train.checkpoints=[0,1,2]", "attacks=[loss]", adaptation="prompt")
    first = json.loads((prompt.path / "cell.json").read_text())["checkpoints"][0]
    assert first["adaptation_hash"] != "none"  # virtual tokens change the model from the first step


def test_an_attack_of_the_trajectory_reads_every_checkpoint_so_far_and_finds_a_canary(tmp_path):
    """lt_iqr reads the NLL each checkpoint's signals hold (no pass of its own), runs from the second
    checkpoint on, and finds full fine-tuning's members (16 a side, 60 epochs, the canary recipe)."""
    import numpy as np

    outcome = cell(
        tmp_path, "split.members=16", "split.nonmembers=16", "train.checkpoints=[0,30,60]", "train.lr=0.003",
        "attacks=[loss,lt_iqr]", adaptation="full", seed=int(os.environ.get("PRIVAUDITOR_TEST_SEED", "0")),
    )  # fmt: skip
    record = json.loads((outcome.path / "cell.json").read_text())
    assert [c["attacks"] for c in record["checkpoints"]] == [["loss"], ["loss", "lt_iqr"], ["loss", "lt_iqr"]]
    low, _ = outcome.metrics["lt_iqr"]["auc_ci"]
    assert low > 0.5, outcome.metrics["lt_iqr"]
    nll = []
    for checkpoint in record["checkpoints"]:
        table = pq.read_table(outcome.path / checkpoint["path"] / "signals.parquet").to_pylist()
        nll.append({r["sample_id"]: -np.mean(r["logp"], dtype=np.float64) for r in table})
    files = sorted((outcome.path / "views" / "trajectory").glob("*.parquet"))
    assert len(files) == 2  # checkpoints 30 and 60
    longest = max((pq.read_table(f).to_pylist() for f in files), key=lambda rows: len(rows[0]["nll"]))
    for row in longest:
        assert row["nll"] == pytest.approx([n[row["sample_id"]] for n in nll], rel=1e-6)
    plan_ran_the_cell(outcome.path, record)


def test_an_attack_of_the_trajectory_needs_two_checkpoints():
    settings = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance"}
    with pytest.raises(PrivauditorError, match=r"attack 'lt_iqr' reads a training trajectory: .* not \[2\]"):
        cell_config(settings, ["train.checkpoints=[2]", "attacks=[loss,lt_iqr]"]).resolve()
    none = {"model": "tiny-gpt2", "adaptation": "none", "dataset": "finance"}
    assert cell_config(none, ["attacks=[loss,lt_iqr]"]).resolve().train.checkpoints == (0,)  # never runs
