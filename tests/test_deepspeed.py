"""A cell's adaptation under Ray Train with 2 gloo workers and DeepSpeed ZeRO-2 / ZeRO-3 on CPU.

Each cell is compared with the same cell trained in one process, and its saved adaptation is reloaded
onto a fresh base and scored again.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from privauditor.orchestrator.run.ray_train import RayTrainLauncher
from privauditor.tasks.cell.run import CellEnvironment, run_cell
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.spec.resolved import CellSpec

pytestmark = [pytest.mark.ray, pytest.mark.slow]

BASE = {"model": "tiny-llama", "dataset": "finance"}
SETTINGS = [
    "split={members: 16, nonmembers: 8, validation: 8}",
    "train.epochs=2",
    "train.max_length=48",
    "attacks=[loss]",
    "score.bootstrap=20",
]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    # One trial-less driver plus two workers of one logical CPU each; the cores are shared.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("results")


def member_loss_scores(path):
    rows = pq.read_table(path / "scores.parquet").to_pylist()
    return {r["sample_id"]: r["score"] for r in rows if r["member"]}


def rescored(technique, adapter_dir):
    """LOSS scores of the members with the saved adaptation reloaded onto a fresh base."""
    from privauditor.tasks.adaptations import build_adaptation
    from privauditor.tasks.data.splits import draw_split
    from privauditor.tasks.datasets import load_dataset
    from privauditor.tasks.models import load_model
    from privauditor.tasks.passes.forward import score_examples
    from privauditor.tasks.spec.config import SplitConfig

    loaded = load_model("tiny-llama")
    model = build_adaptation(technique).load(loaded.model, loaded.family, adapter_dir)
    members = draw_split(load_dataset("finance"), SplitConfig(16, 8, 8), 0).members
    stats = score_examples(model, loaded.tokenizer, members, 48, False)
    return {e.sample_id: float(np.mean(s.logp)) for e, s in zip(members, stats, strict=True)}


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("technique", ["full", "lora"])
def test_two_worker_deepspeed_cell_matches_one_process_and_reloads(ray_session, results, technique, stage):
    base = BASE | {"adaptation": technique}
    local = run_cell(cell_config(base, SETTINGS), results)  # DONE after the first stage: reused
    config = cell_config(base, [*SETTINGS, "train.workers=2", f"train.deepspeed.stage={stage}"])
    assert config.cell_id() != local.cell_id
    outcome = run_cell(config, results, CellEnvironment(distributed=RayTrainLauncher(cpus_per_worker=1)))

    record = json.loads((outcome.path / "cell.json").read_text())
    one = json.loads((local.path / "cell.json").read_text())
    train = CellSpec.from_dict(record["config"]).train
    assert train.workers == 2 and train.deepspeed.stage == stage
    assert (outcome.path / "DONE").exists() and not (outcome.path / ".train").exists()
    assert record["trainable_params"] == one["trainable_params"] > 0
    losses, one_losses = record["train"]["epoch_losses"], one["train"]["epoch_losses"]
    assert losses[-1] < losses[0]  # it trained
    # comparable with one process (same global batch, order and schedule; fp32 here)
    assert abs(losses[0] - one_losses[0]) < 0.02 * one_losses[0], (losses, one_losses)
    assert abs(record["utility_loss"] - one["utility_loss"]) < 0.05 * one["utility_loss"]

    # the gathered, saved weights reload onto a fresh base and give the cell's own scores
    scores, again = member_loss_scores(outcome.path), rescored(technique, outcome.path / "adapter")
    assert scores.keys() == again.keys() and all(abs(scores[k] - again[k]) < 1e-4 for k in scores)


def test_deepspeed_cell_without_a_launcher_is_a_one_line_error(results):
    config = cell_config(BASE | {"adaptation": "lora"}, [*SETTINGS, "train.workers=2", "train.epochs=1"])
    with pytest.raises(PrivauditorError, match="train under Ray Train") as error:
        run_cell(config, results)
    assert "\n" not in str(error.value) and not (results / "cells" / config.cell_id()).exists()
