"""``privauditor plan --cluster`` for a cluster user: the cells that fit no node type grouped with the
cheapest fix (and the printed ``--set`` really making them fit), totals that say what they leave out,
the storage estimate, placeholder values and the expected cost of preemptions on spot node types."""

from __future__ import annotations

import re

import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.plan.fixes import OFFLOAD
from privauditor.orchestrator.plan.inputs import GIB, is_spot, load_prices, read_cluster
from privauditor.orchestrator.plan.memory import memory_parts
from privauditor.orchestrator.plan.notes import lost_seconds, placeholder_lines, preemptions, spot_lines
from privauditor.orchestrator.plan.plan import plan_cells, tokens_for
from privauditor.orchestrator.plan.storage import SIGNAL_BYTES, SIGNAL_FILES, SNAPSHOT_BYTES, cell_storage
from privauditor.orchestrator.sweepfile.sweep import load_sweep
from privauditor.tasks.infra.errors import PrivauditorError

#: GPT-2 XL in fp32 at batch 8 x 128 tokens: scoring 6.6 GB; LoRA trains in 11.7 GB (7.1 with
#: checkpointing), prefix tuning in 15.1 (10.5; 3.7 GB of trained state), full fine-tuning in 28.8
SWEEP = {
    "name": "cluster",
    "seeds": [0],
    "matrix": {
        "model": ["openai-community/gpt2-xl"],
        "adaptation": ["none", "lora", "prefix", "full"],
        "dataset": ["finance"],
    },
    "attacks": ["loss", "reference"],
    "split": {"members": 100, "nonmembers": 100, "validation": 20},
    "train": {"epochs": 2, "max_length": 128, "batch_size": 8},
}


def write(tmp_path, memory_gb=10, larger=False, node_config=None, tag="ami-0123456789abcdef0", seeds=(0,)):
    """A price table with a ``memory_gb`` device (and, ``larger``, an 80 GB instance the cluster does not
    use), and a cluster of one-GPU nodes of it whose image is ``tag``."""
    prices = load_prices()
    prices["devices"] = {
        "G": {"memory_gb": memory_gb, "peak_flops": 1e14},
        "G80": {"memory_gb": 80, "peak_flops": 4e14},
    }
    prices["instances"] = {"small": {"usd_per_hour": 1.0, "cpus": 8, "memory_gb": 64, "gpus": 1, "device": "G"},
                           "head": {"usd_per_hour": 0.5, "cpus": 8, "memory_gb": 32}}  # fmt: skip
    if larger:
        prices["instances"]["big"] = {
            "usd_per_hour": 9.0,
            "cpus": 8,
            "memory_gb": 64,
            "gpus": 1,
            "device": "G80",
        }
        prices["instances"]["other"] = {"usd_per_hour": 2.0, "cpus": 8, "memory_gb": 64, "gpus": 1,
                                        "device": "G80", "provider": "gcp"}  # fmt: skip
    config = {"InstanceType": "small", "ImageId": tag} | (node_config or {})
    types = {"head_cpu": {"resources": {"CPU": 8}, "node_config": {"InstanceType": "head"}},
             "gpu": {"max_workers": 4, "resources": {"CPU": 8, "GPU": 1}, "node_config": config}}  # fmt: skip
    cluster = {"provider": {"type": "aws"}, "available_node_types": types, "head_node_type": "head_cpu"}
    files = {"prices.yaml": prices, "cluster.yaml": cluster, "sweep.yaml": SWEEP | {"seeds": list(seeds)}}
    for name, data in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(data))
    return [str(tmp_path / name) for name in files]


def planned_with(sweep_file, cluster_file, prices_file, sets=()):
    prices = load_prices(prices_file)
    nodes = read_cluster(cluster_file, prices, None)
    return plan_cells(load_sweep(sweep_file, list(sets)), nodes, tokens_for(False))


def plan_out(capsys, *args):
    assert main(["plan", *args]) == 0
    return capsys.readouterr().out


def test_unfit_cells_grouped_with_the_cheapest_fix_that_really_fits(tmp_path, capsys):
    prices_file, cluster_file, sweep_file = write(tmp_path)
    out = plan_out(capsys, sweep_file, "--cluster", cluster_file, "--prices", prices_file)
    groups = [line for line in out.splitlines() if line.startswith("fits no node type")]
    assert len(groups) == 3  # lora, prefix, full: one line each
    by = {t: next(g for g in groups if f" x {t})" in g) for t in ("lora", "prefix", "full")}
    assert all(re.match(r"fits no node type: \S+__s0__\w+ \(openai", g) for g in groups)  # one cell: its id
    assert all("over 90% of G (10 GB)" in g for g in groups)
    assert (
        by["lora"].endswith("for the cell)")
        and "fix: --set train.gradient_checkpointing=true (" in by["lora"]
    )
    assert (
        "fix: --set train.deepspeed.stage=3 --set train.deepspeed.offload=true (" in by["full"]
    )  # alone enough
    assert (
        "--set train.gradient_checkpointing=true --set train.deepspeed.stage=3" in by["prefix"]
    )  # both needed
    assert "cost $" in out and "for the 1 cells that fit" in out and "3 cells left out" in out
    before = planned_with(sweep_file, cluster_file, prices_file)
    for technique, sets in (("lora", ["train.gradient_checkpointing=true"]), ("full", list(OFFLOAD)),
                            ("prefix", ["train.gradient_checkpointing=true", *OFFLOAD])):  # fmt: skip
        before = [
            p for p in planned_with(sweep_file, cluster_file, prices_file) if p.spec.adaptation == technique
        ]
        after = [
            p
            for p in planned_with(sweep_file, cluster_file, prices_file, sets)
            if p.spec.adaptation == technique
        ]
        assert all(p.node is None for p in before) and all(p.node is not None for p in after)
        shown = float(re.search(r"\(([\d.]+) GB per device", by[technique]).group(1))
        assert shown == pytest.approx(
            after[0].memory / GIB, abs=0.051
        )  # the memory the fix prints is the plan's


def test_a_larger_node_type_first_and_no_setting_at_all(tmp_path, capsys):
    prices_file, cluster_file, sweep_file = write(tmp_path, larger=True, seeds=(0, 1))
    out = plan_out(capsys, sweep_file, "--cluster", cluster_file, "--prices", prices_file)
    groups = [line for line in out.splitlines() if line.startswith("fits no node type")]
    assert all(
        f"fits no node type, 2 cells of openai-community/gpt2-xl x {t}: " in out for t in ("lora", "full")
    )
    # the 80 GB instance of another provider is cheaper, but the cluster is on aws
    assert len(groups) == 3 and all("fix: add a node type with instance big ($9/h)" in g for g in groups)
    prices_file, cluster_file, sweep_file = write(tmp_path, memory_gb=4)
    out = plan_out(capsys, sweep_file, "--cluster", cluster_file, "--prices", prices_file)
    none = next(line for line in out.splitlines() if " x none)" in line)
    scoring = memory_parts(
        *(lambda p: (p.spec, p.work))(planned_with(sweep_file, cluster_file, prices_file)[0])
    ).peak
    assert f"no setting makes it fit: needs a node with {scoring / GIB / 0.9:.1f} GB per device" in none
    assert "cost $0.00 for the 0 cells that fit" in out and "4 cells left out" in out


def test_every_cell_fits_and_the_total_says_so(tmp_path, capsys):
    prices_file, cluster_file, sweep_file = write(tmp_path, memory_gb=40, tag="ami-5e2f7a91c0d3b846e")
    out = plan_out(capsys, sweep_file, "--cluster", cluster_file, "--prices", prices_file)
    assert "fits no node type" not in out and "for all 4 cells" in out and "left out" not in out
    assert "placeholder" not in out and "spot node type" not in out and "storage: about " in out


def test_placeholders_named_by_key(tmp_path):
    _, cluster_file, _ = write(tmp_path)
    data = yaml.safe_load((tmp_path / "cluster.yaml").read_text())
    data["setup_commands"] = [
        "sudo mount -t nfs4 fs-0123456789abcdef0.efs.us-west-2.amazonaws.com:/ /mnt/results"
    ]
    data["provider"]["project_id"] = "my-project-id"
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(data))
    lines = placeholder_lines(cluster_file)
    assert len(lines) == 3
    assert "available_node_types.gpu.node_config.ImageId = ami-0123456789abcdef0" in lines[1] or any(
        "available_node_types.gpu.node_config.ImageId = ami-0123456789abcdef0" in line for line in lines
    )
    assert any("setup_commands[0] = fs-0123456789abcdef0" in line for line in lines)
    assert any("provider.project_id = my-project-id" in line for line in lines)
    assert len(placeholder_lines("aws")) == 2  # the shipped file: its AMI (three keys) and its EFS id


def test_spot_node_types_and_the_cost_of_preemptions(tmp_path):
    assert is_spot({"InstanceMarketOptions": {"MarketType": "spot"}})
    assert is_spot({"scheduling": {"preemptible": True}}) and is_spot(
        {"scheduling": {"provisioningModel": "SPOT"}}
    )
    assert not is_spot({"scheduling": {"onHostMaintenance": "TERMINATE"}}) and not is_spot({})
    spot = {"InstanceMarketOptions": {"MarketType": "spot"}}
    prices_file, cluster_file, sweep_file = write(tmp_path, memory_gb=40, node_config=spot)
    prices = load_prices(prices_file)
    planned = planned_with(sweep_file, cluster_file, prices_file)
    assert all(p.node.spot for p in planned)
    lines = spot_lines(planned, prices)
    rate = prices["spot_preemptions_per_hour"]
    expected = sum(p.seconds for p in planned) / 3600 * rate
    assert len(lines) == 1 and f"{expected:.3g} expected preemptions over its 4 cells" in lines[0]
    lora = next(p for p in planned if p.spec.adaptation == "lora")
    steps = 2 * -(-100 // 8)  # epochs x steps per epoch
    assert lost_seconds(lora, notice=False) > 0
    assert lost_seconds(lora, notice=True) == pytest.approx(2 * lost_seconds(lora, notice=False) / steps)
    assert lost_seconds(lora) == lost_seconds(lora, notice=True)  # one process: its notice is heard
    found, lost, usd = preemptions(planned, rate)
    assert found == pytest.approx(expected)
    assert lost == pytest.approx(sum(p.seconds / 3600 * rate * lost_seconds(p) for p in planned))
    assert usd == pytest.approx(lost / 3600 * 1.0)  # one-GPU nodes at $1/h
    assert 0 < preemptions(planned, rate, notice=True)[1] < preemptions(planned, rate, notice=False)[1] / 5
    prices["spot_preemptions_per_hour"] = 2 * rate
    assert f"{2 * expected:.3g} expected" in spot_lines(planned, prices)[0]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(prices | {"spot_preemptions_per_hour": -1}))
    with pytest.raises(PrivauditorError, match="spot_preemptions_per_hour must be >= 0"):
        load_prices(tmp_path / "bad.yaml")


def test_storage_by_its_rule(tmp_path):
    prices_file, cluster_file, sweep_file = write(tmp_path, memory_gb=40)
    planned = {p.spec.adaptation: p for p in planned_with(sweep_file, cluster_file, prices_file)}
    lora, full, none = planned["lora"], planned["full"], planned["none"]
    records, tokens = 200, lora.work.tokens.text
    one = lora.work.trainable * SNAPSHOT_BYTES
    assert cell_storage(lora).snapshots == 2 * one  # its one checkpoint's and the final adapter
    assert cell_storage(full).snapshots == full.work.shape.total_params * SNAPSHOT_BYTES * 2
    assert cell_storage(none).snapshots == 0
    assert cell_storage(lora).signals == int(records * tokens * SIGNAL_BYTES * (SIGNAL_FILES + 2))


def test_checkpointing_in_the_plan(tmp_path):
    prices_file, cluster_file, sweep_file = write(tmp_path, memory_gb=40)
    plain = {p.spec.adaptation: p for p in planned_with(sweep_file, cluster_file, prices_file)}
    sets = ["train.gradient_checkpointing=true"]
    on = {p.spec.adaptation: p for p in planned_with(sweep_file, cluster_file, prices_file, sets)}
    assert on["none"].memory == plain["none"].memory and on["none"].flops == plain["none"].flops
    for technique in ("lora", "prefix", "full"):
        assert on[technique].checkpointing and on[technique].memory < plain[technique].memory
        assert on[technique].flops[0] > plain[technique].flops[0]  # the forward again, in training
