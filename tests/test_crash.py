"""Crash safety: a sweep killed with SIGKILL during adaptation, scoring or leaderboard writing loses
nothing and redoes nothing finished; SIGINT stops it cleanly.

Each run is a real ``privauditor run`` in its own process group; ``PRIVAUDITOR_FAULT``
(:mod:`privauditor.tasks.infra.faults`) parks the process that reaches the chosen point, and the test kills
the whole group (driver, Ray, the cell's worker) with SIGKILL there.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
import yaml

from privauditor.orchestrator.sweepfile.sweep import parse_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "crash",
    "matrix": {"model": ["tiny-gpt2"], "adaptation": ["none", "lora"], "dataset": ["climate"]},
    "attacks": ["loss", "zlib", "min_k_pp"],
    "split": {"members": 16, "nonmembers": 16, "validation": 8},
    "train": {"epochs": 2, "max_length": 64},
    "score": {"bootstrap": 50},
    "run": {"cpus_per_trial": 1, "max_failures": 0, "max_concurrent_trials": 1},
}
LORA = next(c.cell_id() for c in parse_sweep(SWEEP).cells if c.adaptation == "lora")


def start(tmp_path, out, fault=None, sweep=SWEEP):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PRIVAUDITOR_FAULT", None)
    if fault:
        env["PRIVAUDITOR_FAULT"] = fault
    command = [sys.executable, "-m", "privauditor.orchestrator.cli", "run", str(path), "--out", str(out)]
    with open(tmp_path / f"{out.name}.log", "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_for(marker, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before reaching the fault point"
        assert time.monotonic() < deadline, "the fault point was never reached"
        time.sleep(0.2)


def gone(pgid, timeout=30):
    """Every process of the group has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return False


def done_cells(out):
    """Fingerprint of every file of every finished cell."""
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for d in (out / "cells").glob("*/")
        if (d / "DONE").exists()
        for p in d.rglob("*")
        if p.is_file()
    }


def readable(out):
    for path in out.rglob("*.parquet"):
        if "/ray/" not in str(path):
            pq.read_table(path)  # raises on a torn file


@pytest.mark.parametrize(
    "fault",
    [f"training@{LORA}", f"scoring@{LORA}", "leaderboard"],
    ids=["adapting", "scoring", "leaderboard"],
)
def test_sigkill_at_any_point_then_rerun_loses_and_redoes_nothing(fault, tmp_path):
    out, marker = tmp_path / "results", tmp_path / "stopped"
    proc = start(tmp_path, out, f"{fault}:{marker}")
    wait_for(marker, proc)
    finished = done_cells(out)  # parked: nothing moves until the kill
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert gone(proc.pid), "processes of the killed sweep survived"
    assert not (out / "cells" / LORA / "DONE").exists()
    readable(out)

    rerun = start(tmp_path, out)
    assert rerun.wait(timeout=600) == 0, (tmp_path / "results.log").read_text()[-3000:]
    printed = (tmp_path / "results.log").read_text().split("sweep 'crash'")[-1]
    done_before = len({p.split("/")[1] for p in finished})
    assert done_before == 1  # `none` (first in the grid, one trial at a time) had finished: it must stay
    assert f"{done_before} already done, {2 - done_before} to run" in printed
    assert {k: v for k, v in done_cells(out).items() if k in finished} == finished  # nothing redone
    assert len(list((out / "cells").glob("*/DONE"))) == 2
    readable(out)
    assert pq.read_table(out / "leaderboard.parquet").num_rows == 2 * 3
    assert not list(out.glob(".*.tmp-*")) and not list(out.glob("plots/.*.tmp-*"))


def test_sigint_stops_cleanly_and_keeps_what_finished(tmp_path):
    out, marker = tmp_path / "results", tmp_path / "stopped"
    proc = start(tmp_path, out, f"scoring@{LORA}:{marker}")
    wait_for(marker, proc)
    os.kill(proc.pid, signal.SIGINT)  # Ctrl-C to the driver
    assert proc.wait(timeout=120) == 130
    printed = (tmp_path / "results.log").read_text()
    assert "interrupted: 1 cells not finished" in printed
    assert "1 cells ran, 0 failed, 1 stopped" in printed  # the stopped cell is not counted as run
    assert gone(proc.pid), "Ray was not shut down"
    assert (out / "cells" / LORA / "INTERRUPTED").exists() and not (out / "cells" / LORA / "DONE").exists()
    assert pq.read_table(out / "leaderboard.parquet").num_rows == 3  # the cell that finished


def test_a_killed_worker_is_a_failed_attempt_and_the_cell_is_retried(tmp_path):
    out, marker = tmp_path / "results", tmp_path / "stopped"
    sweep = SWEEP | {"run": SWEEP["run"] | {"max_failures": 1}}
    proc = start(tmp_path, out, f"training@{LORA}:{marker}", sweep)
    wait_for(marker, proc)
    os.kill(int(marker.read_text()), signal.SIGKILL)  # the cell's worker dies (as under the OOM killer)
    assert proc.wait(timeout=600) == 0
    printed = (tmp_path / "results.log").read_text()
    assert f"cell {LORA} failed (attempt 1), retrying" in printed
    assert len(list((out / "cells").glob("*/DONE"))) == 2 and gone(proc.pid)
