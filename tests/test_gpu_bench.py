"""``benchmarks/gpu_bench.py`` on a CPU at its tiny shapes: ``prepare``, then ``run`` with Ray, DeepSpeed,
opacus, faker and gensim unimportable (a GPU machine it runs on need have none of them). Its last line is
the JSON ``privauditor plan --calibrate`` reads: the keys, privauditor's scores against MIMIR's loop, the
batched per-sample gradients against one backward pass per text, both precisions trained, the planner's
memory, and no goal judged on a CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_bench.py"
#: not on the lent accelerator machine's image (torch, transformers, peft), and too large to travel there
ABSENT = ("ray", "deepspeed", "opacus", "faker", "gensim", "datasets", "wandb")
KEYS = {"bench", "version", "date", "device", "device_type", "versions", "peak_bf16_tflops", "scoring",
        "gradnorm", "training", "host_sync", "goals"}  # fmt: skip
SCORING = {"shape", "batch", "texts", "privauditor_s", "logits_forward_s", "mimir_s", "mimir_device_stats_s",
           "speedup_vs_mimir", "max_diff_nats", "tflops", "peak_memory_gb"}  # fmt: skip
GRADNORM = {"shape", "technique", "texts", "batched_s", "loop_s", "speedup", "max_rel_diff"}
TRAINING = {"shape", "technique", "precision", "batch", "tokens_per_s", "tflops", "peak_memory_gb",
            "planned_memory_gb", "skipped"}  # fmt: skip


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """(the inputs' folder, the JSON of ``run --shapes tiny --device cpu``, its --out file's text)."""
    folder = tmp_path_factory.mktemp("gpu_bench")
    made = subprocess.run([sys.executable, str(SCRIPT), "prepare", str(folder), "--records", "48"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    argv = [
        str(SCRIPT),
        "run",
        str(folder),
        "--shapes",
        "tiny",
        "--device",
        "cpu",
        "--out",
        str(folder / "b.json"),
    ]
    run = (f"import runpy, sys; sys.modules.update(dict.fromkeys({ABSENT!r})); sys.argv = {argv!r}; "
           f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, json.loads(done.stdout.strip().splitlines()[-1]), (folder / "b.json").read_text()


def test_prepare_writes_small_inputs_that_travel(bench):
    folder, _, _ = bench
    records = (folder / "records.jsonl").read_text().splitlines()
    assert len(records) == 48 and {"sample_id", "prompt", "target"} <= set(json.loads(records[0]))
    assert (folder / "tokenizer" / "tokenizer.json").is_file()
    assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) < 2_000_000


def test_the_last_line_has_every_key_the_calibration_reads(bench):
    folder, result, written = bench
    assert set(result) >= KEYS and result["errors"] == []
    assert (result["bench"], result["version"], result["device_type"]) == ("gpu_bench", 1, "cpu")
    assert set(result["versions"]) == {"torch", "transformers", "peft", "privauditor"}
    assert result["peak_bf16_tflops"] > 0
    assert all(set(r) >= SCORING for r in result["scoring"]) and result["scoring"]
    assert all(set(r) >= GRADNORM for r in result["gradnorm"]) and result["gradnorm"]
    assert all(set(r) >= TRAINING for r in result["training"]) and result["training"]
    assert {"shape", "with_sync_s", "without_sync_s", "ratio"} <= set(result["host_sync"])
    assert json.loads(written) == result


def test_the_reader_of_plan_calibrate_takes_it_as_a_gpu_benchmark(bench, tmp_path):
    from privauditor.orchestrator.plan.bench import read_benchmark

    _, result, _ = bench
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result | {"device_type": "cuda", "device": "NVIDIA H200"}))
    assert read_benchmark(path)["training"] == result["training"]


def test_privauditor_scores_what_mimirs_loop_scores(bench):
    _, result, _ = bench
    rows = result["scoring"]
    assert {(r["shape"], r["batch"]) for r in rows} == {
        (s, b) for s in ("tiny-llama", "tiny-bloom") for b in (16, 64)
    }
    assert all(r["max_diff_nats"] < 1e-3 and r["tflops"] > 0 and r["peak_memory_gb"] is None for r in rows), (
        rows
    )


def test_batched_per_sample_gradient_norms_are_the_loops(bench):
    _, result, _ = bench
    assert all(r["max_rel_diff"] < 1e-3 and r["technique"] == "lora" for r in result["gradnorm"])


def test_each_technique_trains_at_both_precisions_with_a_planned_memory(bench):
    _, result, _ = bench
    rows = result["training"]
    assert all(r["skipped"] is None and r["tokens_per_s"] > 0 and r["tflops"] > 0 for r in rows), rows
    assert all(r["planned_memory_gb"] > 0 and r["peak_memory_gb"] is None for r in rows), rows
    for technique in ("lora", "full"):
        found = {(r["precision"], r["batch"]) for r in rows if r["technique"] == technique}
        assert found == {(p, b) for p in ("fp32", "bf16-mixed") for b in (8, 32)}, technique


def test_no_goal_is_judged_on_a_cpu(bench):
    _, result, _ = bench
    assert result["goals"] and all(value is None for value in result["goals"].values())


def test_run_without_prepared_inputs_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_bench", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    assert module.main(["run", str(tmp_path), "--shapes", "tiny", "--device", "cpu"]) == 2
    error = capsys.readouterr().err.strip()
    assert "has no records.jsonl" in error and "prepare" in error and "\n" not in error
