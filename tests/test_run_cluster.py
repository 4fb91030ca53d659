"""``privauditor run --cluster``: the sweep's cells are planned on the cluster file's node types before Ray
starts, and a sweep with a cell that fits none of them is refused in one line (no Ray, no results folder)."""

from __future__ import annotations

import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.run import trials

SWEEP = {
    "name": "onto-a-cluster",
    "matrix": {"model": ["openai-community/gpt2-xl"], "adaptation": ["none", "lora"], "dataset": ["finance"]},
    "attacks": ["loss"],
    "split": {"members": 16, "nonmembers": 16, "validation": 4},
    "train": {"epochs": 1, "max_length": 64},
}
ONE_GPU = {  # a head and one-GPU workers of the shipped price table's g5.2xlarge (24 GB A10G)
    "cluster_name": "one-gpu",
    "head_node_type": "head_cpu",
    "available_node_types": {
        "head_cpu": {"resources": {"CPU": 8}, "node_config": {"InstanceType": "m6i.2xlarge"}},
        "gpu_1x": {"min_workers": 0, "max_workers": 2, "resources": {"CPU": 8, "GPU": 1},
                   "node_config": {"InstanceType": "g5.2xlarge"}},
    },
}  # fmt: skip


class RayStarted(Exception):
    """Raised where the run would first reach Ray."""


@pytest.fixture
def no_ray(monkeypatch):
    """The run stops where it would first touch Ray: a refusal must come before it."""

    def reached(address):
        raise RayStarted(address)

    monkeypatch.setattr(trials, "check_reachable", reached)


def write(tmp_path, sweep, cluster):
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    return str(tmp_path / "sweep.yaml"), str(tmp_path / "cluster.yaml")


def test_a_cell_that_fits_no_node_type_is_refused_before_ray(tmp_path, capsys, no_ray):
    sweep = SWEEP | {"run": {"gpus_per_trial": 2}}  # two GPUs on one node; the cluster's nodes have one
    sweep_file, cluster_file = write(tmp_path, sweep, ONE_GPU)
    out = tmp_path / "results"
    code = main(["run", sweep_file, "--cluster", cluster_file, "--out", str(out), "--address", "auto"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and not out.exists()
    assert err[0].startswith("privauditor: error: 2 of 2 cells fit no node type of cluster")
    assert ": first openai-community--gpt2-xl__none__finance__s0__" in err[0]  # the first cell, by its id
    assert "gpu_1x: needs 2 GPUs on one node, it has 1" in err[0]


def test_a_sweep_that_fits_goes_on_to_ray(tmp_path, capsys, no_ray):
    sweep_file, cluster_file = write(tmp_path, SWEEP, ONE_GPU)
    with pytest.raises(RayStarted, match="auto"):  # checked, then on to the cluster's address
        main(
            ["run", sweep_file, "--cluster", cluster_file, "--out", str(tmp_path / "r"), "--address", "auto"]
        )
    with pytest.raises(RayStarted):  # a shipped cluster file by name
        main(["run", sweep_file, "--cluster", "aws", "--out", str(tmp_path / "r"), "--address", "auto"])


def test_a_cluster_file_that_is_missing_or_unpriced_is_one_line(tmp_path, capsys, no_ray):
    sweep_file, cluster_file = write(tmp_path, SWEEP, ONE_GPU)
    unpriced = yaml.safe_load(yaml.safe_dump(ONE_GPU))
    unpriced["available_node_types"]["gpu_1x"]["node_config"]["InstanceType"] = "g9.nonesuch"
    (tmp_path / "unpriced.yaml").write_text(yaml.safe_dump(unpriced))
    for cluster, words in (("nowhere.yaml", "cluster file 'nowhere.yaml' does not exist"),
                           (str(tmp_path / "unpriced.yaml"), "g9.nonesuch is not in the price table")):  # fmt: skip
        assert main(["run", sweep_file, "--cluster", cluster, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0]
