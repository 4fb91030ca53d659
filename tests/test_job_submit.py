"""``ray job submit`` of ``privauditor run`` to a running Ray cluster, as Ray users submit work: a head of
its own on this machine (own ports and temp folder, the dashboard that job submission goes through), the
sweep file sent as the job's working directory, the job waited on until it SUCCEEDED, and the
leaderboard files checked. The head's processes are ended by their ids (never ``ray stop``, which
ends every Ray on the machine)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "submitted",
    "matrix": {"model": ["tiny-gpt2"], "adaptation": ["none", "lora"], "dataset": ["climate"]},
    "attacks": ["loss", "zlib"],
    "split": {"members": 16, "nonmembers": 16, "validation": 4},
    "train": {"epochs": 1, "max_length": 64},
    "score": {"bootstrap": 20},
    "run": {"cpus_per_trial": 1, "max_failures": 0},
    "tracking": {"wandb": {"mode": "disabled"}},
}
BIN = Path(sys.executable).parent  # this environment's `ray` and `privauditor`
FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now, all different (held open together while chosen)."""
    with contextlib.ExitStack() as stack:
        found = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            found.append(sock.getsockname()[1])
        return found


def answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url`` (any status: a server with authentication answers 401)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@pytest.fixture
def head(tmp_path_factory):
    """A Ray head with 2 CPUs and its dashboard, started in the foreground (``--block``) so that ending
    this one process ends what it started; yields the dashboard's address and the head's environment."""
    pytest.importorskip("aiohttp", reason="job submission needs the dashboard: pip install 'ray[default]'")
    temp = tmp_path_factory.mktemp("ray")  # short: Ray's socket paths live under it
    gcs, dashboard, client, agent = free_ports(4)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_AUTH_MODE"] = "disabled"  # not Ray's token auth, which a ~/.ray/auth_token would turn on
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # the job's entrypoint finds `privauditor`
    command = [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=2", "--num-gpus=0",
               "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
               f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
               f"--temp-dir={temp}", "--disable-usage-stats"]  # fmt: skip
    log = (temp / "head.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 120
        while not answers(f"{address}/api/version") and time.monotonic() < deadline:
            assert process.poll() is None, (temp / "head.log").read_text()[-2000:]
            time.sleep(1)
        assert answers(f"{address}/api/version"), "the head's dashboard never answered"
        yield address, env
    finally:
        end_head(process, temp)
        log.close()


def end_head(process: subprocess.Popen, temp: Path) -> None:
    """SIGTERM to ``ray start --block`` (it ends the processes it started), then SIGKILL to whatever is
    left of its process group and of the processes whose command line names its temp folder."""
    import psutil

    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    left = []
    for found in psutil.process_iter(["pid", "cmdline"]):
        if found.pid != os.getpid() and str(temp) in " ".join(found.info["cmdline"] or []):
            left.append(found)
    for found in left:
        with contextlib.suppress(psutil.Error):
            found.kill()
    psutil.wait_procs(left, timeout=10)
    process.wait(timeout=10)


def test_privauditor_run_submitted_as_a_ray_job(head, tmp_path):
    from ray.job_submission import JobSubmissionClient

    address, env = head
    job_dir, out = tmp_path / "job", tmp_path / "results"
    job_dir.mkdir()
    (job_dir / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    submit = [str(BIN / "ray"), "job", "submit", "--address", address, "--submission-id", "privauditor-test",
              "--working-dir", str(job_dir), "--no-wait", "--",
              "privauditor", "run", "sweep.yaml", "--out", str(out), "--address", "auto"]  # fmt: skip
    done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    client = JobSubmissionClient(address)
    deadline = time.monotonic() + 900
    while (status := str(client.get_job_status("privauditor-test"))).split(".")[-1] not in FINAL:
        assert time.monotonic() < deadline, "the job did not finish in 15 minutes"
        time.sleep(2)
    logs = client.get_job_logs("privauditor-test")
    assert status.endswith("SUCCEEDED"), logs[-3000:]
    assert "sweep 'submitted': 2 cells" in logs
    assert all((out / name).is_file() for name in ("leaderboard.parquet", "leaderboard.html", "findings.md"))
    assert sum((cell / "DONE").is_file() for cell in (out / "cells").iterdir()) == 2
