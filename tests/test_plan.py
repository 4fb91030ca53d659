"""``privauditor plan``: a sweep priced on a cluster before it runs (placement by memory, FLOPs, cost, a
budget, models known only by size), and calibration recovering the rates a run's timings came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.plan.calibrate import calibrate, compare, finished_cells, observations
from privauditor.orchestrator.plan.costs import train_flops
from privauditor.orchestrator.plan.inputs import load_prices, read_cluster
from privauditor.orchestrator.plan.plan import plan_cells, seconds, tokens_for
from privauditor.orchestrator.plan.shapes import registered, shape_of
from privauditor.orchestrator.plan.work import SHARED, UNITS, cell_work
from privauditor.orchestrator.sweepfile.sweep import load_sweep
from privauditor.tasks.models import MODELS

TOTAL = re.compile(
    r"total: .*PFLOP of scoring; ([\d.]+) GPU-hours, wall time ([\d.]+ (?:s|min|h)) .* cost \$([\d.]+)"
)
HOURS = {"s": 1 / 3600, "min": 1 / 60, "h": 1.0}


def totals_in(out: str) -> tuple[float, float, float]:
    """GPU-hours, wall time in hours and cost printed by ``plan``."""
    hours, wall, usd = TOTAL.search(out).groups()
    number, unit = wall.split()
    return float(hours), float(number) * HOURS[unit], float(usd)


SWEEP = {
    "name": "priced",
    "matrix": {
        "model": ["openai-community/gpt2-xl"],
        "adaptation": ["none", "lora", "full"],
        "dataset": ["finance"],
    },
    "attacks": ["loss", "reference", "neighbourhood", "gradnorm", "blind"],
    "attack_params": {"neighbourhood": {"k": 3}},
    "split": {"members": 100, "nonmembers": 100, "validation": 20},
    "train": {"epochs": 2, "max_length": 128, "batch_size": 8},
}


def write(tmp_path, sweep=SWEEP, big=True):
    """A price table with a 16 GB and an 80 GB device, and a cluster of one-GPU and (``big``) 8-GPU nodes."""
    prices = load_prices()
    prices["devices"] = {
        "G16": {"memory_gb": 16, "peak_flops": 1e14},
        "G80": {"memory_gb": 80, "peak_flops": 4e14},
    }
    prices["instances"] = {"small": {"usd_per_hour": 1.0, "cpus": 8, "memory_gb": 64, "gpus": 1, "device": "G16"},
                           "large": {"usd_per_hour": 16.0, "cpus": 96, "memory_gb": 1024, "gpus": 8, "device": "G80"},
                           "head": {"usd_per_hour": 0.5, "cpus": 8, "memory_gb": 32}}  # fmt: skip
    types = {"head_cpu": {"resources": {"CPU": 8}, "node_config": {"InstanceType": "head"}},
             "gpu_small": {"max_workers": 4, "resources": {"CPU": 8, "GPU": 1}, "node_config": {"InstanceType": "small"}}}  # fmt: skip
    if big:
        types["gpu_large"] = {
            "max_workers": 1,
            "resources": {"CPU": 96, "GPU": 8},
            "node_config": {"InstanceType": "large"},
        }
    files = {"prices.yaml": prices, "cluster.yaml": {"available_node_types": types, "head_node_type": "head_cpu"},
             "sweep.yaml": sweep}  # fmt: skip
    for name, data in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(data))
    return [str(tmp_path / name) for name in files]


def test_cells_go_to_the_smallest_node_they_fit_and_flops_cost_and_budget_add_up(tmp_path, capsys):
    prices_file, cluster_file, sweep_file = write(tmp_path)
    sweep, prices = load_sweep(sweep_file), load_prices(prices_file)
    nodes = read_cluster(cluster_file, prices, None)
    planned = {p.spec.adaptation: p for p in plan_cells(sweep, nodes, tokens_for())}
    # GPT-2 XL in fp32: 6.2 GB of weights fit 16 GB to score; full fine-tuning's AdamW states do not
    assert planned["none"].node.name == "gpu_small" and planned["lora"].node.name == "gpu_small"
    assert planned["full"].node.name == "gpu_large" and 16 * 2**30 < planned["full"].memory < 72 * 2**30
    shape = shape_of("openai-community/gpt2-xl")
    expected = (
        2 * 100 * train_flops(shape, 128, 1, shape.matmul_params)
    )  # epochs x members, a hub dataset's max_length
    assert planned["full"].work.own.stages["train"]["train"] == expected
    assert (
        planned["lora"].work.own.stages["train"]["train"] < expected * 0.7
    )  # no weight gradients of the body
    for p in planned.values():
        assert p.usd == pytest.approx(p.seconds / 3600 * p.node.usd_per_hour * p.gpus / p.node.gpus)
    # the split's shared work (base signals, neighbour texts, the blind control) is charged once, to `none`
    none_own = seconds(planned["none"].work.own, planned["none"].node.rates)
    assert planned["none"].seconds > none_own and planned["lora"].seconds == pytest.approx(
        seconds(planned["lora"].work.own, planned["lora"].node.rates)
    )

    assert main(["plan", sweep_file, "--cluster", cluster_file, "--prices", prices_file, "--cells",
                 "--budget-usd", f"{planned['none'].usd + planned['lora'].usd + 1e-6:.9f}"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    hours, wall, usd = totals_in(out)
    assert hours == pytest.approx(sum(p.gpu_hours for p in planned.values()), rel=1e-3)
    assert wall == pytest.approx(
        planned["full"].seconds / 3600, abs=0.01
    )  # the longest cell, alone on its node
    assert usd == pytest.approx(sum(p.usd for p in planned.values()) + wall * 0.5, rel=1e-2, abs=0.01)
    assert (
        "budget" in out and "2 of 3 cells fit" in out and "openai-community/gpt2-xl x full (1 cells)" in out
    )
    assert all(p.spec.cell_id() in out for p in planned.values())  # --cells: a row each

    _, cluster_file, _ = write(tmp_path, big=False)
    assert main(["plan", sweep_file, "--cluster", cluster_file, "--prices", prices_file]) == 0
    unfit = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fits no node type")]
    assert (
        len(unfit) == 1
        and planned["full"].spec.cell_id() in unfit[0]
        and "over 90% of G16 (16 GB)" in unfit[0]
    )


def test_a_model_known_only_by_size_or_config_and_bad_input(tmp_path, capsys):
    sweep = dict(
        SWEEP, matrix=dict(SWEEP["matrix"], model=["someorg/private-7b"], adaptation=["none", "lora"])
    )
    prices_file, cluster_file, sweep_file = write(tmp_path, sweep)
    assert main(["plan", sweep_file, "--cluster", cluster_file, "--prices", prices_file]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "someorg/private-7b" in err and "--params" in err
    given = ["--params", "someorg/private-7b=7B:llama", "--cluster", cluster_file, "--prices", prices_file]
    assert main(["plan", sweep_file, *given]) == 0
    assert "total:" in capsys.readouterr().out
    with registered(["someorg/private-7b=7B:llama"]):
        assert 6.3e9 < shape_of("someorg/private-7b").total_params < 7.7e9
    assert "someorg/private-7b" not in MODELS  # for the command's run only
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "opt", "hidden_size": 256, "ffn_dim": 1024, "num_hidden_layers": 4,
                                  "num_attention_heads": 4, "vocab_size": 5000, "word_embed_proj_dim": 256}))  # fmt: skip
    other = dict(sweep, matrix=dict(sweep["matrix"], model=["someorg/from-config"]))
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    assert main(["plan", str(tmp_path / "other.yaml"), "--params", f"someorg/from-config={config}"]) == 0
    with registered([f"someorg/from-config={config}"]):
        assert shape_of("someorg/from-config").layers == 4 and shape_of("someorg/from-config").vocab == 5000
    broken = tmp_path / "broken.yaml"
    broken.write_text("available_node_types: [\n")
    for bad, words in ((["--params", "x/y=7B"], "give the family"), (given[:2] + ["--cluster", "nowhere.yaml"], "does not exist"),
                       (["--params", "x/y=big:llama"], "is not a size"),
                       (given[:2] + ["--prices", sweep_file], "has no 'as_of'"),
                       (given[:2] + ["--cluster", str(config)], "has no available_node_types"),
                       (given[:2] + ["--cluster", str(broken)], "broken.yaml line 2: not valid YAML")):  # fmt: skip
        capsys.readouterr()
        assert main(["plan", sweep_file, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err


def test_calibration_recovers_the_rates_a_runs_timings_came_from(tmp_path):
    """Timings made from known rates (a cell's own stages, each split's shared ones by its first cell, one
    cell per worker process paying the start-up, the costly attacks at a best checkpoint before the last in
    one trajectory of two): the fit predicts every cell and split to rounding."""
    sweep = dict(SWEEP, matrix=dict(SWEEP["matrix"], model=["tiny-gpt2", "tiny-opt"]),
                 train={"max_length": 64, "checkpoints": [1, 2]})  # fmt: skip
    *_, sweep_file = write(tmp_path, sweep)
    known = dict(zip(UNITS, (2e-10, 5e-10, 3e-3, 8e-3, 1e-3, 2e-4, 0.1, 0.05, 3.0, 1e-9), strict=True))
    tokens_of, done = tokens_for(measure=False), set()
    cells = load_sweep(sweep_file).cells
    for index, cell in enumerate(cells):
        spec = cell.resolve(build=False)
        ran = [["loss", "reference", "blind"], ["loss", "reference", "neighbourhood", "gradnorm", "blind"]]
        if spec.adaptation == "full" and spec.model == "tiny-opt":
            ran[0] = ran[1]  # the best checkpoint came first
        ran = ran[-len(spec.train.checkpoints) :]
        best = 0 if ran[0] == ran[-1] else len(ran) - 1
        work = cell_work(spec, shape_of, tokens_of, best)
        timings = {label: seconds(dict(units), known) for label, units in work.own.stages.items()}
        timings["load_model"] += known["process"] * (index < 2)
        for key, shared in work.shared.items():
            for label, units in shared.stages.items():
                if (key, label) not in done:
                    done.add((key, label))
                    timings[label] = timings.get(label, 0.0) + seconds(dict(units), known)
        folder = tmp_path / "results" / "cells" / f"cell{index}"
        folder.mkdir(parents=True)
        record = {"cell_id": f"cell{index}", "config": spec.to_dict(), "timings": timings,
                  "checkpoints": [{"attacks": a, "best": i == best} for i, a in enumerate(ran)], "runtime": {"pid": index % 2, "ray_node_id": "n"}}  # fmt: skip
        (folder / "cell.json").write_text(json.dumps(record, default=str))
        (folder / "DONE").write_text(json.dumps({"finished": f"2026-01-01T00:00:{index:02d}Z"}))
    finished = finished_cells(tmp_path / "results")
    assert [c.first for c in finished[:3]] == [True, True, False]
    works = [cell_work(c.spec, shape_of, tokens_of, c.best) for c in finished]
    rows = observations(finished, works)
    assert any("blind_record" in units for units, _ in rows)  # the split's shared stages are rows too
    rates = calibrate(tmp_path / "results", known["load_byte"], shape_of, tokens_of)
    assert rates["best_before_last"] == 0.25  # 1 of the 4 trajectories
    for units, spent in rows:
        assert seconds(units, rates) == pytest.approx(spent, rel=1e-6)
    found = compare(tmp_path / "results", rates, shape_of, tokens_of)
    assert found["predicted_s"] == pytest.approx(found["measured_s"], rel=0.05)  # a priori: best unknown
    assert all(abs(p - m) < 1e-6 * m for p, m in found["splits"])
    assert SHARED.strip() in " ".join(label for c in finished for label in c.timings)


def test_the_paper_sweep_priced_on_the_aws_cluster(capsys):
    root = Path(__file__).resolve().parents[1]
    assert (
        main(
            ["plan", str(root / "benchmarks/sweeps/paper.yaml"), "--cluster", str(root / "clusters/aws.yaml")]
        )
        == 0
    )
    out = capsys.readouterr().out
    hours, wall, usd = totals_in(out)
    assert "459 cells" in out and hours > 0 and wall > 0 and usd > 0
    unfit = [line for line in out.splitlines() if line.startswith("fits no node type: ")]
    ids = {
        cell.resolve(build=False).cell_id()
        for cell in load_sweep(str(root / "benchmarks/sweeps/paper.yaml")).cells
    }
    for line in unfit:  # one line each: the cell, and why each GPU node type cannot hold it
        assert line.split(": ")[1] in ids and "gpu_1x: " in line and "gpu_8x: " in line
    assert f"{len(unfit)} cells fit no node type" in out or not unfit


def benchmark(device="NVIDIA H200", **changes):
    """A gpu_bench JSON: three scoring rows (one naming no precision), a skipped one and an fp32 one;
    bf16-mixed training rows (one skipped) and an fp32 one. The utilisation leaves out the fp32 rows."""
    score = lambda tflops, skipped=None, precision="bf16-mixed": {"shape": "7b", "batch": 16, "texts": 64,  # noqa: E731
        "tflops": tflops, "peak_memory_gb": 20.0, "skipped": skipped, "precision": precision}  # fmt: skip
    train = lambda technique, precision, tflops, skipped=None: {"shape": "7b", "technique": technique,  # noqa: E731
        "precision": precision, "batch": 8, "tokens_per_s": 1e4, "tflops": tflops, "peak_memory_gb": 60.0,
        "planned_memory_gb": 64.0, "skipped": skipped}  # fmt: skip
    found = {"bench": "gpu_bench", "version": 1, "date": "2026-12-05", "device": device, "device_type": "cuda",
             "versions": {"torch": "2.5"}, "peak_bf16_tflops": 989.0, "gradnorm": [], "host_sync": {}, "goals": {},
             "scoring": [score(300.0), score(500.0), score(400.0), score(None, "out of memory"), score(9.0, None, "fp32")],
             "training": [train("lora", "bf16-mixed", 200.0), train("full", "bf16-mixed", 350.0),
                          train("full", "fp32", 20.0), train("full", "bf16-mixed", None, "out of memory")]}  # fmt: skip
    del found["scoring"][0]["precision"]  # the schema's rows name none
    return found | changes


def test_a_gpu_benchmark_sets_its_devices_utilisation(tmp_path, capsys):
    """The medians of the unskipped scoring rows (400) and bf16-mixed training rows (275 TFLOP/s) over the
    H200's 989 TFLOP/s peak; other devices keep the table's; the benchmark's JSON as the last line of its
    output is read too."""
    from privauditor.orchestrator.plan.bench import calibrate_device
    from privauditor.orchestrator.plan.inputs import device_rates

    path = tmp_path / "bench.json"
    path.write_text(json.dumps(benchmark(), indent=1))  # the --out file, over several lines
    prices = load_prices()
    device, lines = calibrate_device(prices, path)
    assert device == "H200-141GB" and prices["devices"][device]["utilisation"] == pytest.approx(
        {"train": 275 / 989, "forward": 400 / 989}
    )
    assert device_rates(prices, device)["train"] == pytest.approx(1 / 275e12)
    assert device_rates(prices, "A100-40GB")["train"] == pytest.approx(1 / (312e12 * 0.3))
    said = "\n".join(lines)
    assert "NVIDIA H200, benchmarked 2026-12-05" in said
    assert "of 2 training rows at precision bf16-mixed" in said
    assert "median 400 TFLOP/s of 3 scoring rows" in said and "7b full batch 8: 350" in said
    prices_file, cluster_file, sweep_file = write(tmp_path)
    table, cluster = (yaml.safe_load(Path(f).read_text()) for f in (prices_file, cluster_file))
    table["devices"]["H200-141GB"] = {"memory_gb": 141, "peak_flops": 989.0e12}
    h200 = {"usd_per_hour": 4.0, "cpus": 16, "memory_gb": 256, "gpus": 1, "device": "H200-141GB"}
    table["instances"]["h200"] = h200
    cluster["available_node_types"]["gpu_h200"] = {"max_workers": 1, "resources": {"CPU": 16, "GPU": 1},
                                                   "node_config": {"InstanceType": "h200"}}  # fmt: skip
    for name, data in ((prices_file, table), (cluster_file, cluster)):
        Path(name).write_text(yaml.safe_dump(data))
    log = tmp_path / "bench.log"  # the script's output: its JSON last
    log.write_text("scoring ... done\n" + json.dumps(benchmark(scoring=[])) + "\n\n")
    given = ["--cluster", cluster_file, "--prices", prices_file, "--calibrate", str(log)]
    assert main(["plan", sweep_file, *given]) == 0
    out = capsys.readouterr().out
    assert "forward: no scoring rows; it stays 0.3, the table's" in out and "train 0.278: median 275" in out
    assert f"H200-141GB's utilisation from {log}" in out and "no node type has it" not in out


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"device": "Tesla T4"}, "benchmark device 'Tesla T4' matches no price table device (A10G,"),
        ({"device": "NVIDIA A100 PCIe"}, "matches several price table devices (A100-40GB, A100-80GB)"),
        ({"device_type": "cpu", "device": "cpu"}, "a CPU benchmark cannot calibrate a GPU device"),
        ({"bench": "scoring"}, "is not benchmarks/gpu_bench.py's JSON"),
        ({"version": 2}, "benchmark version 2, this planner reads 1"),
        ({"training": [{"precision": "bf16-mixed", "tflops": "fast", "skipped": None}]}, "training[0].tflops must be a number > 0, not 'fast'"),
        ({"scoring": [], "training": []}, "no scoring or bf16-mixed training rows to calibrate from"),
        ({"date": None}, "'date' must be a string, not None"),
    ],
)  # fmt: skip
def test_a_malformed_or_foreign_benchmark_is_a_one_line_error(tmp_path, capsys, changes, words):
    *_, sweep_file = write(tmp_path)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(benchmark(**changes)))
    assert main(["plan", sweep_file, "--calibrate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_benchmark_device_names_map_to_the_price_tables_devices(tmp_path):
    from privauditor.orchestrator.plan.bench import is_benchmark, match_device, read_benchmark
    from privauditor.tasks.infra.errors import PrivauditorError

    devices = load_prices()["devices"]
    for name, entry in (("NVIDIA H200", "H200-141GB"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
                        ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA H100 80GB HBM3", "H100-80GB"),
                        ("NVIDIA A10G", "A10G"), ("NVIDIA L4", "L4"), ("h200-141gb", "H200-141GB")):  # fmt: skip
        assert match_device(name, devices) == entry, name
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "notes.txt").write_text('{"bench": "other"}\n')
    assert is_benchmark(tmp_path / "broken.json") and not is_benchmark(tmp_path / "notes.txt")
    with pytest.raises(PrivauditorError, match=r"broken.json is not benchmarks/gpu_bench.py's JSON"):
        read_benchmark(tmp_path / "broken.json")
    assert not is_benchmark(tmp_path)  # a folder: a finished sweep's results
    table = yaml.safe_load(Path(write(tmp_path)[0]).read_text())
    table["devices"]["G16"]["utilisation"] = {"train": 2}  # a device's own share is checked as the table's
    (tmp_path / "prices.yaml").write_text(yaml.safe_dump(table))
    with pytest.raises(
        PrivauditorError, match=r"devices.G16.utilisation.train must be a share in \(0, 1\], not 2"
    ):
        load_prices(tmp_path / "prices.yaml")
