"""clusters/: every cluster YAML passes Ray's own autoscaler validation; its node types are the planner's
(each instance priced in prices.yaml with the CPUs, GPUs and GPU memory the YAML declares); the pinned
versions match."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOT_RAY = {"prices.yaml", "kuberay.yaml"}  # the planner's price table; a Kubernetes manifest
CLUSTERS = sorted(p for p in (ROOT / "clusters").glob("*.yaml") if p.name not in NOT_RAY)
CLOUDS = [p for p in CLUSTERS if yaml.safe_load(p.read_text())["provider"]["type"] != "local"]
DEVICE, MEMORY = "privauditor/device", "privauditor/gpu-memory-gb"  # a GPU node type's labels


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


def disagreements(config, prices):
    """Where a cluster file's node types and the price table differ: an instance that is not priced, or
    CPUs, GPUs (and a GCP node's accelerator count), device or GPU memory other than the table's."""
    found = []
    for name, node in config["available_node_types"].items():
        node_config, resources, labels = node["node_config"], node["resources"], node.get("labels") or {}
        instance = node_config.get("InstanceType") or node_config.get("machineType")
        listed = prices["instances"].get(instance)
        if listed is None:
            found.append(f"{name}: {instance} is not in prices.yaml")
            continue
        declared = {"CPUs": resources.get("CPU"), "GPUs": resources.get("GPU", 0)}
        for what, value in (("CPUs", listed["cpus"]), ("GPUs", listed.get("gpus", 0))):
            if declared[what] != value:
                found.append(f"{name}: {declared[what]} {what}, prices.yaml's {instance} has {value}")
        accelerators = sum(a["acceleratorCount"] for a in node_config.get("guestAccelerators", []))
        if "machineType" in node_config and accelerators != declared["GPUs"]:
            found.append(f"{name}: {accelerators} guestAccelerators for {declared['GPUs']} GPUs")
        if declared["GPUs"]:
            device = listed["device"]
            memory = prices["devices"][device]["memory_gb"]
            if labels.get(DEVICE) != device or float(labels.get(MEMORY, "nan")) != memory:
                found.append(f"{name}: labels {labels}, prices.yaml's {instance} has {device} ({memory} GB)")
    return found


@pytest.mark.parametrize("path", CLOUDS, ids=lambda p: p.name)
def test_node_types_are_the_price_tables_and_the_planners(path):
    """One source of truth: the node types Ray's autoscaler starts are the ones the planner prices."""
    from privauditor.orchestrator.plan.inputs import load_prices, read_cluster

    config, prices = yaml.safe_load(path.read_text()), load_prices()
    assert disagreements(config, prices) == []
    for node in read_cluster(path, prices, None):  # what `privauditor plan/run --cluster` read
        declared = config["available_node_types"][node.name]
        assert (node.cpus, node.gpus) == (declared["resources"]["CPU"], declared["resources"].get("GPU", 0))
        assert node.device_memory_gb == float((declared.get("labels") or {}).get(MEMORY, 0))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda t: t["gpu_1x"]["resources"].update(GPU=2), "gpu_1x: 2 GPUs, prices.yaml's g5.2xlarge has 1"),
        (lambda t: t["gpu_8x"]["resources"].update(CPU=64), "gpu_8x: 64 CPUs"),
        (lambda t: t["gpu_1x"]["labels"].update({MEMORY: "80"}), "has A10G (24 GB)"),
        (lambda t: t["gpu_1x"]["node_config"].update(InstanceType="g6.2xlarge"), "g6.2xlarge is not in"),
    ],
)
def test_a_node_type_the_price_table_disagrees_with_is_found(edit, words):
    from privauditor.orchestrator.plan.inputs import load_prices

    config = yaml.safe_load((ROOT / "clusters" / "aws.yaml").read_text())
    edit(config["available_node_types"])
    found = disagreements(config, load_prices())
    assert len(found) == 1 and words in found[0]


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


KUBERAY = ROOT / "clusters" / "kuberay"


def crd_schema(name):
    """The ``ray.io/v1`` openAPIV3Schema of a vendored KubeRay CRD, strict as ``kubectl apply`` is (its
    default field validation rejects unknown fields): an object schema that lists its properties and
    keeps no unknown fields gets ``additionalProperties: false``."""
    import gzip

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with gzip.open(KUBERAY / f"ray.io_{name}.yaml.gz", "rt") as crd:
        versions = yaml.load(crd, Loader=loader)["spec"]["versions"]
    return strict(next(v for v in versions if v["name"] == "v1")["schema"]["openAPIV3Schema"])


def strict(schema):
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    found = {key: strict(value) if key != "properties" else {k: strict(v) for k, v in value.items()}
             for key, value in schema.items()}  # fmt: skip
    keeps_unknown = "additionalProperties" in found or found.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in found and not keeps_unknown:
        found["additionalProperties"] = False
    return found


@pytest.fixture(scope="module")
def schemas():
    return {"RayJob": crd_schema("rayjobs"), "RayCluster": crd_schema("rayclusters")}


def manifest_problems(job, schemas):
    """What KubeRay's schemas find wrong with a RayJob (and its rayClusterSpec as a RayCluster's spec)."""
    import jsonschema

    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "c"},
               "spec": job["spec"]["rayClusterSpec"]}  # fmt: skip
    return [f"{e.json_path}: {e.message}" for kind, document in (("RayJob", job), ("RayCluster", cluster))
            for e in jsonschema.Draft7Validator(schemas[kind]).iter_errors(document)]  # fmt: skip


def kuberay_job():
    documents = list(yaml.safe_load_all((ROOT / "clusters" / "kuberay.yaml").read_text()))
    return next(d for d in documents if d["kind"] == "RayJob")


def test_the_kuberay_manifest_passes_kuberays_schema(schemas):
    job = kuberay_job()
    assert manifest_problems(job, schemas) == []
    spec = job["spec"]["rayClusterSpec"]
    assert job["spec"]["entrypoint"].startswith("privauditor run ")
    assert spec["enableInTreeAutoscaling"] is True and spec["autoscalerOptions"]["version"] == "v2"
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in head["limits"]  # a CPU head
    (gpu,) = spec["workerGroupSpecs"]
    limits = gpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert gpu["minReplicas"] == 0 < gpu["maxReplicas"] and limits["nvidia.com/gpu"] == 1


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda s: s["workerGroupSpecs"][0].update(minReplicas="zero"), "'zero' is not of type 'integer'"),
        (lambda s: s["workerGroupSpecs"][0].update(minReplica=0), "'minReplica' was unexpected"),
        (lambda s: s["autoscalerOptions"].update(version="v3"), "'v3' is not one of"),
        (lambda s: s.pop("headGroupSpec"), "'headGroupSpec' is a required property"),
    ],
)
def test_kuberays_schema_rejects_a_broken_manifest(schemas, edit, words):
    job = kuberay_job()
    edit(job["spec"]["rayClusterSpec"])
    found = manifest_problems(job, schemas)
    assert found and any(words in problem for problem in found), found
