"""A sweep on a 3-node Ray cluster (one machine, ``ray.cluster_utils.Cluster``): cells land on several
nodes and write one results folder; a worker node removed while every node runs a cell does not stop
the sweep: the lost cell is retried elsewhere and every cell ends DONE."""

from __future__ import annotations

import json
import threading
import time

import pytest

from privauditor.orchestrator.run.runner import run_sweep
from privauditor.orchestrator.sweepfile.sweep import parse_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "nodes",
    "seeds": [0, 1],
    "matrix": {"model": ["tiny-gpt2"], "adaptation": ["head", "lora", "prompt"], "dataset": ["climate"]},
    "attacks": ["loss", "zlib", "min_k"],
    "split": {"members": 48, "nonmembers": 16, "validation": 8},
    "train": {"epochs": 3, "max_length": 64},
    "score": {"bootstrap": 20},
    "run": {"max_failures": 2},
    "tracking": {"wandb": {"mode": "disabled"}},
}


@pytest.fixture
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def running_cells(out):
    cells = out / "cells"
    return [c for c in cells.iterdir() if not (c / "DONE").exists()] if cells.is_dir() else []


def test_sweep_spreads_over_nodes_and_survives_losing_one(cluster, tmp_path, capsys):
    cluster, workers = cluster
    sweep, out = parse_sweep(SWEEP), tmp_path / "results"
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(code=run_sweep(sweep, out)))
    thread.start()
    deadline = time.monotonic() + 600
    while len(running_cells(out)) < 3 and time.monotonic() < deadline:  # every node busy with a cell
        time.sleep(0.2)
    assert len(running_cells(out)) == 3, "three cells never ran at once"
    cluster.remove_node(workers[1], allow_graceful=False)
    thread.join(timeout=900)
    assert not thread.is_alive() and outcome["code"] == 0

    printed = capsys.readouterr().out
    cells = sorted((out / "cells").iterdir())
    assert len(cells) == 6 and all((c / "DONE").exists() for c in cells)
    nodes = {json.loads((c / "cell.json").read_text())["runtime"]["ray_node_id"] for c in cells}
    assert len(nodes) >= 2  # cells ran on more than one node, into one results folder
    assert "failed (attempt 1), retrying" in printed  # the cell on the removed node ran again elsewhere
    assert "6 cells ran, 0 failed" in printed and (out / "leaderboard.parquet").exists()


def test_attack_actor_runs_on_its_trials_node(cluster):
    """A trial's attack jobs read the cell's files on the trial's node, so its attack actor runs there
    too, on every node of the cluster."""
    import ray

    from privauditor.orchestrator.run.attack_actor import ray_tasks

    def node(_job: object = None) -> str:
        return ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=1)
    def trial_like():  # one per node: each node has 1 CPU
        time.sleep(1)  # the three hold every CPU at once, as a sweep's trials do
        return node(), ray_tasks(node, [None] * 3)

    placed = ray.get([trial_like.remote() for _ in range(3)])
    assert len({here for here, _ in placed}) == 3
    assert all(set(there) == {here} for here, there in placed), placed
