"""A sweep on an autoscaling Ray cluster (Ray's fake multi-node provider: the autoscaler starts and stops
real raylets on this machine). The head has no CPU for trials; the worker types mirror
``clusters/aws.yaml`` (many one-GPU nodes, one larger node, none at first) with custom resources in place of
GPUs, and the sweep's ``run.resources`` / ``run.resources_for`` say which cells need which. Workers scale
up from zero, the larger cell runs on the larger node, a one-GPU node killed mid-cell (its raylet and every
process it started, as a spot preemption ends them) is replaced (at most two run at once, so a third is a
replacement) and its cell finished elsewhere without touching finished cells, every ``cell.json`` and
``findings.md`` name where the cell ran, and idle workers go once the sweep ends.

The cluster is started and stopped here, not by ``ray.cluster_utils.AutoscalingCluster`` (its start and
shutdown run ``ray stop --force``, which ends every Ray on the machine, and use port 6379): a head on free
ports with its own temp folder, ended by killing exactly the processes that inherit its marker variable or
hold its log files open, pass or fail.
About 80 s on 2 cores (11 cells of tiny-gpt2); ``pytest -s`` prints the events it saw with their times."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from privauditor.orchestrator.run.runner import run_sweep
from privauditor.orchestrator.sweepfile.sweep import parse_sweep

#: the environment at collection, before any test of the session ran
STARTING_ENV = dict(os.environ)
pytestmark = [pytest.mark.ray, pytest.mark.slow]

IDLE_MINUTES = 0.1  # the autoscaler's schema takes any number >= 0; Ray's own fake-cluster tests use 0.05
# a lost raylet is declared dead in about 3 s (Ray's defaults take about 15 s)
HEALTH_CHECK = json.dumps({"health_check_period_ms": 1000, "health_check_failure_threshold": 3})
SESSION_ENV = "AUTOSCALING_TEST_SESSION"  # marks the test cluster's processes (their environment)
PROVIDER = "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider"
NODE_TYPES = {  # clusters/aws.yaml's, their GPUs as custom resources
    "gpu_1x": {"resources": {"CPU": 1, "gpu_1x": 1}, "node_config": {}, "min_workers": 0, "max_workers": 2},
    "gpu_8x": {"resources": {"CPU": 2, "gpu_8x": 1}, "node_config": {}, "min_workers": 0, "max_workers": 1},
}
SWEEP = {
    "name": "autoscale",
    # 40 one-GPU cells: work for two nodes long after one is lost, so the autoscaler replaces it (a
    # replacement came 11-28 s after the kill; with ten cells the survivor could finish them first)
    "seeds": list(range(20)),
    "matrix": {"model": ["tiny-gpt2"], "adaptation": ["head", "lora", "full"], "dataset": ["climate"]},
    "exclude": [{"adaptation": "full", "seed": list(range(1, 20))}],  # one cell for the larger node
    "attacks": ["loss", "zlib"],
    "split": {"members": 48, "nonmembers": 16, "validation": 8},
    "train": {"epochs": 2, "max_length": 64},
    "score": {"bootstrap": 20},
    "run": {"max_failures": 2, "resources": {"gpu_1x": 1}, "resources_for": {"full": {"gpu_8x": 1}}},
    "tracking": {"wandb": {"mode": "disabled"}},
}


def kind_of(node: dict) -> str | None:
    """A worker node's type, by the custom resource only that type advertises (None: the head)."""
    return next((kind for kind in NODE_TYPES if kind in node.get("Resources", {})), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def autoscaling_config(gcs: str) -> dict:
    """The fake provider's cluster config; ``type: external`` names the provider's class because the
    ``fake_multinode`` type loads defaults from an ``example.yaml`` the Ray wheel lacks."""
    head = {"ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0}}
    return {
        "cluster_name": "autoscale",
        "max_workers": 3,
        "upscaling_speed": 10.0,
        "idle_timeout_minutes": IDLE_MINUTES,
        "provider": {
            "type": "external", "module": PROVIDER, "gcs_address": gcs, "use_node_id_as_ip": True,
            "disable_node_updaters": True, "disable_launch_config_check": True,
        },  # fmt: skip
        "available_node_types": head | NODE_TYPES,
        "head_node_type": "ray.head.default",
        "auth": {"ssh_user": "ubuntu"},
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }  # fmt: skip


def environ(pid: int) -> dict[str, str]:
    """A process's environment, read raw (a retitled Ray worker's starts with NULs, where psutil stops)."""
    try:
        entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(e.decode(errors="replace").partition("=")[::2] for e in entries if b"=" in e)


def session_processes(temp: Path) -> list[psutil.Process]:
    """This user's processes of this cluster (the head's, the raylets the autoscaler started, their workers
    and agents): each inherits ``SESSION_ENV`` set to its temp folder, or holds a log file open in it (Ray
    rewrites its processes' titles over their command lines and, for some, their environments)."""
    me, inside = psutil.Process(), f"{temp}/"
    found = []
    for proc in psutil.process_iter(["pid", "username"]):
        if proc.pid == me.pid or proc.info["username"] != me.username():
            continue
        with contextlib.suppress(psutil.Error):
            if environ(proc.pid).get(SESSION_ENV) == str(temp) or any(
                f.path.startswith(inside) for f in proc.open_files()
            ):
                found.append(proc)
    return found


def end_session(temp: Path) -> None:
    """Kill exactly this cluster's processes (the head's, the raylets the autoscaler started, their workers),
    again while any is left (a raylet may start a worker as its neighbours die)."""
    for _ in range(5):
        procs = session_processes(temp)
        if not procs:
            return
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=10)


@pytest.fixture
def autoscaling(monkeypatch):
    """An autoscaling head (``ray start --head`` with the fake provider) on free ports; yields its address
    and its temp folder, which finds its processes; every one of them is killed afterwards, pass or fail."""
    import ray
    import yaml

    # the environment as this process started: a local Ray or W&B session run earlier in it leaves
    # variables (RAY_AUTH_MODE=token where a token file exists, a dead WANDB_SERVICE socket, ...) that the
    # head's raylets and this driver must not inherit
    for name in set(os.environ) - set(STARTING_ENV):
        monkeypatch.delenv(name)
    for name, value in STARTING_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token: the driver joins as the head allows

    # a short folder: Ray's socket paths under a pytest tmp_path exceed the 107 characters Unix allows
    temp = Path(tempfile.mkdtemp(prefix="pa-as-", dir="/tmp"))
    ip = ray._private.services.get_node_ip_address()
    port = free_port()
    gcs = f"{ip}:{port}"
    (temp / "cluster.yaml").write_text(yaml.safe_dump(autoscaling_config(gcs)))
    env = os.environ | {  # the fake provider, a quick autoscaler, no token (a driver here needs none)
        "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1", "AUTOSCALER_HEARTBEAT_TIMEOUT_S": "5",
        "RAY_AUTH_MODE": "disabled", SESSION_ENV: str(temp),
    }  # fmt: skip
    ray_cli = str(Path(sys.executable).with_name("ray"))
    command = [
        ray_cli, "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--num-cpus=0",
        f"--autoscaling-config={temp / 'cluster.yaml'}", "--include-dashboard=false",
        f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}", "--disable-usage-stats", f"--system-config={HEALTH_CHECK}",
    ]  # fmt: skip
    try:
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
        ray.init(address=gcs, log_to_driver=False)
        yield gcs, temp
    finally:
        ray.shutdown()
        end_session(temp)
        shutil.rmtree(temp, ignore_errors=True)
        assert not session_processes(temp), "processes of the test's Ray cluster are still running"


class Watch:
    """Polls ``ray.nodes()`` beside the sweep and records each worker node's start and end with the time
    since the sweep started."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.seen: dict[str, tuple[str, bool]] = {}  # node id -> (type, alive)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def note(self, event: str) -> None:
        self.events.append((time.monotonic() - self.started, event))

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.step()
            time.sleep(0.5)

    def step(self) -> None:
        import ray

        for node in ray.nodes():
            node_id, alive = node["NodeID"], node["Alive"]
            kind = kind_of(node) or self.seen.get(node_id, (None, False))[0]  # a dead node lists none
            if kind is None:
                continue
            if self.seen.get(node_id, (kind, not alive))[1] != alive:  # new, or changed
                self.note(f"{kind} node {node_id[-5:]} {'up' if alive else 'gone'}")
            self.seen[node_id] = (kind, alive)

    def alive(self, kind: str | None = None) -> list[str]:
        return [n for n, (k, up) in self.seen.items() if up and kind in (None, k)]

    def first(self, text: str) -> float:
        return next(t for t, event in self.events if text in event)


def started_cells(out: Path, seen: dict[str, float]) -> set[str]:
    """The one-GPU cells whose folders appeared under 2 s ago (so far from done); ``seen`` keeps when each
    folder appeared."""
    now = time.monotonic()
    for cell in (out / "cells").iterdir() if (out / "cells").is_dir() else []:
        seen.setdefault(cell.name, now)
    return {c for c, t in seen.items() if now - t < 2 and "__full__" not in c}


def node_of(cells: set[str], out: Path, temp: Path) -> tuple[str, str] | None:
    """One of ``cells`` still running, and its node: the fake provider's node id in the environment of the
    worker process whose working folder is the cell's trial's (Tune's)."""
    for proc in session_processes(temp):
        with contextlib.suppress(psutil.Error):
            cell, node = Path(proc.cwd()).name, environ(proc.pid).get("RAY_CLOUD_INSTANCE_ID")
            if cell in cells and node and not (out / "cells" / cell / "DONE").exists():
                return cell, node
    return None


def preempt(out: Path, sweep: threading.Thread, temp: Path, watch: Watch) -> tuple[str, str]:
    """Once a cell has finished, kill the raylet of the node where a one-GPU cell has just started; returns
    the cell and the node."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and sweep.is_alive():
        started = started_cells(out, seen)
        found = node_of(started, out, temp) if started and any((out / "cells").glob("*/DONE")) else None
        if found is not None:
            cell, node = found
            watch.note(
                f"killed raylet pid {preempt_node(node, temp)} of gpu_1x node {node[-5:]} mid-cell {cell}"
            )
            return found
        time.sleep(0.2)
    raise AssertionError("no one-GPU cell started once a cell had finished")


def preempt_node(node_id: str, temp: Path) -> int:
    """SIGKILL the raylet of ``node_id`` and every process it started (its workers and agents), as a spot
    preemption ends them all at once; returns the raylet's pid. (The raylet alone is not enough: its
    workers then run on and a trial killed that way can still finish its cell.)"""
    for proc in session_processes(temp):
        if "raylet" in proc.name() and f"--node_id={node_id}" in proc.cmdline():
            for each in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    each.kill()
            return proc.pid
    raise AssertionError(f"no raylet found for node {node_id}")


def finished_files(out: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of every finished cell: its mtime and bytes."""
    found = {}
    for cell in (out / "cells").iterdir():
        if (cell / "DONE").exists():
            for path in sorted(p for p in cell.rglob("*") if p.is_file()):
                found[str(path.relative_to(out))] = (path.stat().st_mtime_ns, path.read_bytes())
    return found


FRESH = "PRIVAUDITOR_TEST_FRESH_PROCESS"


def test_in_a_fresh_process():
    """The test below, in a Python process of its own: a local Ray session run earlier in this one (other
    tests') leaves process state behind with which the fake provider's trial actors never start."""
    node = f"{__file__}::test_sweep_autoscales_places_by_resources_and_survives_preemption"
    env = dict(STARTING_ENV, **{FRESH: "1"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", node],
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    print(done.stdout[-12000:])  # the events, the retry and where each cell ran
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-6000:] + done.stderr[-3000:]


@pytest.mark.skipif(os.environ.get(FRESH) != "1", reason="runs in a fresh process: test_in_a_fresh_process")
def test_sweep_autoscales_places_by_resources_and_survives_preemption(autoscaling, tmp_path, capsys):
    gcs, temp = autoscaling
    sweep, out = parse_sweep(SWEEP), tmp_path / "results"
    watch = Watch()
    assert not watch.alive(), "workers before the sweep: the cluster does not start from zero"
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(code=run_sweep(sweep, out, address=gcs)))
    thread.start()
    try:
        cell, victim = preempt(out, thread, temp, watch)
        before, at = finished_files(out), watch.events[-1][0]
        thread.join(timeout=900)
        assert not thread.is_alive() and outcome["code"] == 0
        ended = time.monotonic() - watch.started
        watch.note("sweep ended")
        while watch.alive() and time.monotonic() - watch.started - ended < IDLE_MINUTES * 60 + 60:
            time.sleep(0.5)
        watch.note("every worker gone" if not watch.alive() else "workers still up")
    finally:
        watch.stop.set()
        watch.thread.join()
    printed = capsys.readouterr().out
    findings = (out / "findings.md").read_text()
    with capsys.disabled():
        print("\nautoscaling events (seconds since the sweep started):")
        for when, event in watch.events:
            print(f"  {when:7.1f}  {event}")
        print("\n".join(line for line in printed.splitlines() if "retrying" in line))
        print("## Where" + findings.split("## Where")[-1].split("\n## ")[0])

    kinds = {node_id: kind for node_id, (kind, _) in watch.seen.items()}
    assert {"gpu_1x", "gpu_8x"} <= set(kinds.values())  # scaled up from zero, both types
    records = {c.name: json.loads((c / "cell.json").read_text()) for c in (out / "cells").iterdir()}
    assert len(records) == 41 and all((out / "cells" / c / "DONE").exists() for c in records)
    for cell_id, record in records.items():
        runtime = record["runtime"]
        want = "gpu_8x" if "__full__" in cell_id else "gpu_1x"
        assert runtime["ray_node_type"] == want == kinds[runtime["ray_node_id"]], cell_id
    retried = records[cell]["runtime"]["ray_node_id"]
    assert retried != victim and kinds[retried] == "gpu_1x"  # the lost cell finished on another node
    started = [e for t, e in watch.events if t > at and e.startswith("gpu_1x") and e.endswith(" up")]
    assert started, "no one-GPU node started after one was lost"  # at most two at once: a replacement
    assert "failed (attempt 1), retrying" in printed  # the preempted cell ran again
    assert before and finished_files(out).items() >= before.items()  # finished cells untouched
    assert not watch.alive(), "idle workers were not removed"
    assert watch.events[-1][0] - ended <= IDLE_MINUTES * 60 + 30
    lines = printed.splitlines()
    assert all("[privauditor]" not in line[1:] and "(autoscaler" not in line for line in lines)
    assert all(f"`{cell_id}`" in findings for cell_id in records) and "gpu_8x" in findings
