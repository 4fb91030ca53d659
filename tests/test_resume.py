"""Preemption: a drain notice (SIGTERM) saves a training cell's step state at the next step boundary and
stops it; the retried cell resumes from that step and ends with exactly the files an uninterrupted run
writes (:mod:`privauditor.tasks.infra.drain`, :mod:`privauditor.tasks.training.resume`)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.infra import drain
from privauditor.tasks.infra.results import CellFolder
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.training import loop as training_loop
from privauditor.tasks.training.resume import STATE_FILE, Preempted

SMALL = ["split.members=12", "split.nonmembers=12", "split.validation=8", "train.max_length=48",
         "train.batch_size=4", "attacks=[loss,zlib]", "train.epochs=3", "train.checkpoints=[0,1,2,3]"]  # fmt: skip


@pytest.fixture(autouse=True)
def no_notice():
    """Every test starts and ends without a drain notice (the flag is process-wide)."""
    drain.reset()
    yield
    drain.reset()


def config(adaptation, *assignments, seed=0):
    settings = {"model": "tiny-gpt2", "adaptation": adaptation, "dataset": "finance", "seed": seed}
    return cell_config(settings, [*SMALL, *assignments])


def notice_after(monkeypatch, step):
    """A drain notice as training's ``step``-th step (of this process's run) ends."""
    original, taken = training_loop._step, []

    def counted(*args, **kwargs):
        summed = original(*args, **kwargs)
        taken.append(1)
        if len(taken) == step:
            drain.request()
        return summed

    monkeypatch.setattr(training_loop, "_step", counted)


def files(cell_dir):
    """Bytes of what the audit wrote at every checkpoint, and the final adapter's files."""
    wanted = [p for p in cell_dir.rglob("*") if p.is_file() and p.name in ("scores.parquet", "metrics.json")]
    wanted += [p for p in (cell_dir / "adapter").rglob("*") if p.is_file()]
    return {str(p.relative_to(cell_dir)): p.read_bytes() for p in wanted}


def record(cell_dir):
    return json.loads((cell_dir / "cell.json").read_text())


@pytest.mark.parametrize(
    ("adaptation", "extra", "at"),
    [
        ("lora", (), 4),
        ("full", (), 3),
        ("lora", ("defence=dp", "defence_params.dp.epsilon=8", "defence_params.dp.gradient_canaries=500"), 5),
    ],
)
def test_a_notice_saves_the_step_and_the_rerun_ends_as_an_uninterrupted_run(
    tmp_path, monkeypatch, seed, adaptation, extra, at
):
    """Mid-epoch (and at an epoch's end, and under DP-SGD's Poisson sampler, noise and gradient canaries):
    the cell stops with :class:`Preempted` and its state on disk; run again, it resumes there and every
    checkpoint's scores and metrics, the gradient canaries' audit, and the final adapter, are byte for
    byte an uninterrupted run's."""
    cell = config(adaptation, *extra, seed=seed)
    whole = run_cell(cell, tmp_path / "whole")
    with monkeypatch.context() as patched:
        notice_after(patched, at)
        with pytest.raises(Preempted, match=f"after step {at} on a drain notice") as stopped:
            run_cell(cell, tmp_path / "cut")
    assert stopped.value.exit_code == 75 and "\n" not in str(stopped.value)
    folder = CellFolder(tmp_path / "cut", cell.cell_id())
    assert (folder.resume_dir / STATE_FILE).exists() and not folder.done
    kept = sorted(p.name for p in (folder.resume_dir / "snapshots").iterdir())
    assert kept == ["step-0.safetensors", "step-3.safetensors"]  # the checkpoints taken before the notice
    drain.reset()
    resumed = run_cell(cell, tmp_path / "cut")
    assert files(resumed.path) == files(whole.path) and len(files(whole.path)) >= 8
    assert record(resumed.path)["checkpoints"] == record(whole.path)["checkpoints"]
    if extra:
        audit = record(resumed.path)["checkpoints"][-1]["extraction"]["one_run"]["kinds"]["gradient"]
        assert audit["m"] == 500 and 0 < audit["included"] < 500
    assert record(resumed.path)["train"]["epoch_losses"] == record(whole.path)["train"]["epoch_losses"]
    assert (record(resumed.path)["resumed_from_step"], record(resumed.path)["preemptions"]) == (at, 1)
    assert (record(whole.path)["resumed_from_step"], record(whole.path)["preemptions"]) == (None, 0)
    assert not folder.resume_dir.exists() and not (resumed.path / ".snapshots").exists()


def test_two_notices_resume_twice(tmp_path, monkeypatch):
    """A resumed run preempted again saves again; the third run counts both preemptions."""
    cell = config("lora")
    whole = run_cell(cell, tmp_path / "whole")
    for at in (2, 3):  # steps 2, then 2 + 3 = 5
        with monkeypatch.context() as patched:
            notice_after(patched, at)
            with pytest.raises(Preempted):
                run_cell(cell, tmp_path / "cut")
        drain.reset()
    resumed = run_cell(cell, tmp_path / "cut")
    assert (record(resumed.path)["resumed_from_step"], record(resumed.path)["preemptions"]) == (5, 2)
    assert files(resumed.path) == files(whole.path)


def test_a_stale_state_of_another_spec_is_ignored(tmp_path, monkeypatch, caplog):
    """A state that names another spec is ignored with a warning and removed: training starts afresh."""
    cell = config("lora")
    whole = run_cell(cell, tmp_path / "whole")
    with monkeypatch.context() as patched:
        notice_after(patched, 4)
        with pytest.raises(Preempted):
            run_cell(cell, tmp_path / "cut")
    drain.reset()
    state_file = CellFolder(tmp_path / "cut", cell.cell_id()).resume_dir / STATE_FILE
    state = torch.load(state_file, weights_only=True)
    torch.save(state | {"key": state["key"] | {"spec": "0" * 16}}, state_file)
    with caplog.at_level(logging.WARNING):
        again = run_cell(cell, tmp_path / "cut")
    assert "ignoring the resume state of another spec" in caplog.text
    assert record(again.path)["resumed_from_step"] is None and record(again.path)["preemptions"] == 0
    assert files(again.path) == files(whole.path)


def test_the_drain_flag():
    """SIGTERM sets the flag once installed (main thread only), any thread may raise it, reset lowers it."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert drain.install() and not drain.requested()
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not drain.requested() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert drain.requested() and drain.noticed_at() is not None
        drain.reset()
        answers = []
        worker = threading.Thread(target=lambda: answers.append(drain.install()) or drain.request())
        worker.start()
        worker.join()
        assert answers == [False] and drain.requested()
        drain.reset()
        assert not drain.requested() and drain.noticed_at() is None
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_second_sigterm_ends_the_process():
    """The first SIGTERM is a notice; a second one ends the process as SIGTERM always did."""
    script = ("import os, signal, time; from privauditor.tasks.infra import drain; drain.install(); "
              "os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.2); assert drain.requested(); print('noticed'); "
              "os.kill(os.getpid(), signal.SIGTERM); time.sleep(10); print('alive')")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM and done.stdout.split() == ["noticed"], done.stderr


CLI_SET = [*SMALL[:-2], "train.epochs=25", "train.checkpoints=[1,25]", "attacks=[loss]"]


def cli(out, log=None):
    """``privauditor cell`` on the small cell in a child process: finished (its ``CompletedProcess``), or
    started with its output going to ``log`` (its ``Popen``)."""
    command = [sys.executable, "-m", "privauditor.orchestrator.cli", "cell", "--model", "tiny-gpt2",
               "--adaptation", "lora", "--dataset", "finance", "--out", str(out)]  # fmt: skip
    for assignment in CLI_SET:
        command += ["--set", assignment]
    # one hash seed: peft writes adapter_config.json's target_modules in a set's order
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONHASHSEED="0")
    if log is None:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def test_sigterm_to_privauditor_cell_saves_and_a_second_run_resumes(tmp_path):
    """A real SIGTERM mid-training: ``privauditor cell`` exits 75 within seconds, its state saved; the next
    ``privauditor cell`` resumes from the step it names and ends with an uninterrupted run's weights."""
    whole = cli(tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    (cell_dir,) = (tmp_path / "whole" / "cells").iterdir()
    snapshot = tmp_path / "cut" / "cells" / cell_dir.name / ".snapshots" / "step-3.safetensors"
    with open(tmp_path / "cut.log", "w") as log:
        proc = cli(tmp_path / "cut", log)
        deadline = time.monotonic() + 300
        while not snapshot.exists():  # training is past its first epoch
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "cut.log").read_text()
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.wait(timeout=30)
    message = (tmp_path / "cut.log").read_text()
    assert proc.returncode == 75 and time.monotonic() - sent < 10, message
    assert "on a drain notice" in message
    step = int(message.split("after step ")[1].split()[0])
    assert 3 <= step < 75, message  # stopped inside training (25 epochs of 3 steps)
    again = cli(tmp_path / "cut")
    assert again.returncode == 0, again.stderr
    assert f"resuming training from step {step}" in again.stderr
    resumed = tmp_path / "cut" / "cells" / cell_dir.name
    assert record(resumed)["resumed_from_step"] == step
    assert (
        files(resumed) == files(cell_dir) and (resumed / "checkpoints" / "step-3" / "scores.parquet").exists()
    )
