"""clusters/: every cluster YAML passes Ray's own autoscaler validation; the pinned versions match."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = sorted(p for p in (ROOT / "clusters").glob("*.yaml") if p.name != "prices.yaml")  # the planner's


def ray_validate(config):
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(config)))  # what `ray up` runs before touching a cloud


def test_the_three_cluster_files_exist():
    assert {p.name for p in CLUSTERS} >= {"local.yaml", "aws.yaml", "gcp.yaml"}


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_cluster_yaml_passes_rays_validation(path):
    config = yaml.safe_load(path.read_text())
    ray_validate(config)
    commands = " ".join(config["setup_commands"])
    assert "clusters/constraints.txt" in commands and "[scale]" in commands  # the pinned install
    if config["provider"]["type"] != "local":
        types = config["available_node_types"]
        head = types[config["head_node_type"]]
        gpu = [t for t in types.values() if t["resources"].get("GPU")]
        assert "GPU" not in head["resources"] and gpu
        assert all(t["min_workers"] == 0 < t["max_workers"] for t in gpu)  # autoscaled from zero
        from privauditor.orchestrator.plan.inputs import load_prices, read_cluster

        priced = read_cluster(path, load_prices(), None)  # every instance type has a price and a device
        assert {n.name for n in priced} == set(types) and all(n.usd_per_hour > 0 for n in priced)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(max_worker=3), "max_worker"),
        (lambda c: c["available_node_types"]["gpu_1x"].update(min_worker=1), "min_worker"),
        (lambda c: c["available_node_types"]["gpu_1x"]["resources"].update(GPU=0.5), "integer"),
        (lambda c: c.update(head_node_type="head"), "head_node_type"),
    ],
)
def test_rays_validation_rejects_a_broken_copy(edit, message):
    config = yaml.safe_load((ROOT / "clusters" / "aws.yaml").read_text())
    edit(config)
    with pytest.raises(Exception, match=message):
        ray_validate(config)


def test_constraints_pin_every_dependency_within_its_range():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    pins = {}
    for line in (ROOT / "clusters" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = Version(version)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["scale"]
    for requirement in requirements:
        name, spec = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?(.*)", requirement).groups()
        key = name.lower().replace("_", "-")
        assert key in pins, f"{name} is not pinned in clusters/constraints.txt"
        assert pins[key] in SpecifierSet(spec), f"{name}=={pins[key]} is outside {spec}"
