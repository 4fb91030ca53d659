"""A drain notice to a Ray Tune trial: SIGTERM to the process running a training cell's trial (as a node
drain or a spot notice gives it) makes the cell save its step state before the process exits; Tune
retries the trial and the cell trains on from that step, ending with the weights an uninterrupted run
gives (``orchestrator/run/trials.py`` ``forward_notices``)."""

from __future__ import annotations

import json
import signal
import threading
import time

import psutil
import pytest

from privauditor.orchestrator.run.runner import run_sweep
from privauditor.orchestrator.sweepfile.sweep import parse_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "drain",
    "matrix": {"model": ["tiny-gpt2"], "adaptation": ["lora"], "dataset": ["finance"]},
    "attacks": ["loss"],
    "split": {"members": 12, "nonmembers": 12, "validation": 8},
    "train": {"epochs": 150, "checkpoints": [1, 150], "max_length": 48, "batch_size": 4},
    "score": {"bootstrap": 20},
    "run": {"max_failures": 1, "cpus_per_trial": 1},
    "tracking": {"wandb": {"mode": "disabled"}},
}


def trial_processes():
    """The processes running a Tune function trial (Ray titles them ``ray::ImplicitFunc...``) of this
    test's own Ray instance (started by the sweep: its processes descend from this one)."""
    here = psutil.Process().children(recursive=True)
    return [p for p in here if "ImplicitFunc" in " ".join(p.cmdline())]


def test_sigterm_to_a_training_trial_saves_its_step_and_the_retried_trial_resumes(tmp_path):
    sweep, out = parse_sweep(SWEEP), tmp_path / "results"
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(code=run_sweep(sweep, out)))
    thread.start()
    deadline = time.monotonic() + 300
    snapshot = None
    while snapshot is None and time.monotonic() < deadline:  # training past its first epoch
        snapshot = next(iter(out.glob("cells/*/.snapshots/step-3.safetensors")), None)
        time.sleep(0.05)
    assert snapshot is not None, "the cell never trained an epoch"
    (trial,) = trial_processes()
    trial.send_signal(signal.SIGTERM)
    thread.join(timeout=600)
    assert outcome.get("code") == 0
    (cell_dir,) = (out / "cells").iterdir()
    record = json.loads((cell_dir / "cell.json").read_text())
    assert record["preemptions"] == 1 and 3 <= record["resumed_from_step"] < 450, record["resumed_from_step"]
    assert not (cell_dir / ".resume").exists()

    import torch

    from privauditor.tasks.cell.run import run_cell
    from privauditor.tasks.spec.resolved import CellSpec

    torch.set_num_threads(1)
    whole = run_cell(CellSpec.from_dict(record["config"]), tmp_path / "whole")
    for name in ("adapter/adapter_model.safetensors", "metrics.json", "scores.parquet"):
        assert (whole.path / name).read_bytes() == (cell_dir / name).read_bytes(), name
