"""``privauditor run`` on Ray: cells as trials, DONE cells skipped, shared work once, the leaderboard."""

from __future__ import annotations

import hashlib
import json
import re

import pyarrow.parquet as pq
import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.plan.calibrate import finished_cells
from privauditor.orchestrator.plan.plan import tokens_for
from privauditor.orchestrator.plan.shapes import shape_of
from privauditor.orchestrator.plan.work import cell_work
from privauditor.orchestrator.report.row_schema import columns
from privauditor.tasks.cell.attack_job import AttackJob, attack_job
from privauditor.tasks.spec.resolved import CellSpec

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "tiny",
    "matrix": {"model": ["tiny-gpt2"], "adaptation": ["none", "lora"], "dataset": ["climate"]},
    "attacks": ["loss", "reference", "neighbourhood", "min_k_pp"],
    "attack_params": {"neighbourhood": {"k": 2}},
    "split": {"members": 24, "nonmembers": 24, "validation": 8},
    "train": {"epochs": 1, "max_length": 64},
    "score": {"bootstrap": 50},
    "run": {"cpus_per_trial": 1, "max_failures": 0},
}


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def fingerprint(out):
    return {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (out / "cells").rglob("*")
        if p.is_file()
    }


def run(tmp_path, sweep, out, capsys, *extra):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    code = main(["run", str(path), "--out", str(out), *extra])
    return code, capsys.readouterr().out


def test_sweep_runs_resumes_and_shares_work(ray_session, tmp_path, capsys):
    out = tmp_path / "results"
    code, printed = run(tmp_path, SWEEP, out, capsys)
    assert code == 0 and "2 to run" in printed
    # the run ends with the findings' Answer, as findings.md holds it
    answer = (out / "findings.md").read_text().split("\n## ")[1].split("\n## ")[0]
    assert f"## {answer.strip()}" in printed and printed.index("## Answer") > printed.index("2 to run")
    done = sorted(p.parent.name for p in (out / "cells").glob("*/DONE"))
    assert len(done) == 2
    table = pq.read_table(out / "leaderboard.parquet")
    assert table.column_names == columns() and table.num_rows == 2 * 4
    for suffix in ("csv", "md", "html"):
        assert (out / f"leaderboard.{suffix}").stat().st_size > 0
    assert 'id="row-data"' in (out / "leaderboard.html").read_text()
    assert len(list((out / "plots").glob("*.png"))) == 2
    # the attacks ran as Ray tasks on the stored signals: the same numbers as in-process
    cell_dir = out / "cells" / done[0]
    record = json.loads((cell_dir / "cell.json").read_text())
    assert record["runtime"]["attacks"] == "ray actor tasks" and record["runtime"]["ray_node_id"]
    metrics = json.loads((cell_dir / "metrics.json").read_text())
    spec = CellSpec.from_dict(record["config"])
    for attack in spec.attacks:
        files = {role: str(out / path) for role, path in record["views"][attack.name].items()}
        signals = str(cell_dir / "signals.parquet")
        _, again = attack_job(
            AttackJob(attack.name, attack.params, signals, files, spec.score.bootstrap, spec.seed)
        )
        assert (
            again["auc"] == metrics[attack.name]["auc"] and again["auc_ci"] == metrics[attack.name]["auc_ci"]
        )
    # shared work once per (base, split): one table of the base's signals, one of neighbour texts
    assert len(list((out / "shared" / "views" / "signals").glob("*.parquet"))) == 1
    assert len(list((out / "shared" / "neighbours").glob("*.parquet"))) == 1

    before = fingerprint(out)
    code, printed = run(tmp_path, SWEEP, out, capsys)
    assert code == 0 and "0 to run" in printed and fingerprint(out) == before

    bigger = json.loads(json.dumps(SWEEP))
    bigger["matrix"]["adaptation"] += ["prompt", "icl"]
    code, printed = run(tmp_path, bigger, out, capsys)
    assert code == 0 and "2 already done, 2 to run" in printed
    assert len(list((out / "cells").glob("*/DONE"))) == 4
    assert {k: v for k, v in fingerprint(out).items() if k in before} == before
    assert len(list((out / "shared" / "views" / "signals").glob("*.parquet"))) == 1  # reused by the new cells
    (icl,) = (out / "cells").glob("*__icl__*")  # in context: the prompts' ids in its folder, no adapter
    assert (icl / "demonstrations.json").is_file() and not (icl / "adapter").exists()

    changed = json.loads(json.dumps(bigger))
    changed["train"]["epochs"] = 2  # `none`, `icl` train nothing: their cells (one checkpoint, epoch 0) stay
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(changed))
    assert main(["run", str(tmp_path / "sweep.yaml"), "--out", str(out)]) == 2  # other settings: refused
    assert "with settings" in capsys.readouterr().err
    code, printed = run(tmp_path, changed, out, capsys, "--add-spec")  # on purpose
    assert code == 0 and "2 already done, 2 to run" in printed
    assert len(list((out / "cells").glob("*/DONE"))) == 6

    (out / "leaderboard.parquet").unlink()
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert pq.read_table(out / "leaderboard.parquet").num_rows == 6 * 4
    assert (out / "findings.md").read_text().startswith("# Findings")
    # where the time went: each stage's seconds summed over the six cells' timings
    timings = [json.loads(p.read_text())["timings"] for p in (out / "cells").glob("*/cell.json")]
    shown = capsys.readouterr().out.split("time per stage, summed over 6 cells")[1]
    cells = [re.split(r"\s{2,}", line.strip()) for line in shown.splitlines()[3:] if line.strip()]
    rows = {cell[0]: float(cell[1]) for cell in cells}
    assert rows["train"] == pytest.approx(sum(t.get("train", 0) for t in timings), abs=0.06)
    assert set(rows) == {stage for t in timings for stage in t}
    # the base's signals: shared work, timed apart from a cell's own, under the label of whichever view
    # reached it first (the `none` cell's target, or the `lora` cell's reference)
    assert {"signals (shared)", "signals(model=reference) (shared)"} & set(rows), sorted(rows)
    # the planner knows every stage a cell timed, under the same label (what calibration fits)
    for cell in finished_cells(out):
        work = cell_work(cell.spec, shape_of, tokens_for(), cell.best)
        planned = set(work.own.stages) | {label for shared in work.shared.values() for label in shared.stages}
        assert set(cell.timings) <= planned, (cell.cell_id, set(cell.timings) - planned)


def test_a_failing_cell_is_reported_and_the_others_finish(ray_session, tmp_path, capsys):
    few = tmp_path / "few.jsonl"
    few.write_text(
        "".join(json.dumps({"text": f"record number {i} of a tiny file"}) + "\n" for i in range(10))
    )
    sweep = json.loads(json.dumps(SWEEP))
    sweep["matrix"] = {"model": ["tiny-gpt2"], "adaptation": ["none"], "dataset": ["climate", str(few)]}
    out = tmp_path / "results"
    code, printed = run(tmp_path, sweep, out, capsys)
    assert code == 1  # 10 records cannot make a 24 / 24 / 8 split
    assert "1 failed" in printed and "FAILED tiny-gpt2__none__" in printed and "few.jsonl" in printed
    assert "failed: PrivauditorError: split asks for 56 records" in printed  # the reason, as it happens
    assert list((out / "ray").rglob("error.txt"))  # the traceback, for whoever wants it
    assert len(list((out / "cells").glob("*/DONE"))) == 1 and "[privauditor] cells 2/2" in printed
    assert pq.read_table(out / "leaderboard.parquet").num_rows == 4


def test_results_on_an_object_store_uri(ray_session, tmp_path, capsys):
    """``--out`` a ``pyarrow.fs`` URI (``file://`` here; ``s3://`` / ``gs://`` the same code path)."""
    remote = tmp_path / "bucket" / "sweep"
    code, printed = run(tmp_path, SWEEP, f"file://{remote}", capsys)
    assert code == 0 and "2 to run" in printed
    done = sorted(p.parent for p in (remote / "cells").glob("*/DONE"))
    assert len(done) == 2
    for cell in done:
        for name in ("cell.json", "signals.parquet", "scores.parquet", "metrics.json"):
            assert (cell / name).stat().st_size > 0
    assert (done[1] / "adapter").is_dir() or (done[0] / "adapter").is_dir()  # the lora cell's weights
    assert pq.read_table(remote / "leaderboard.parquet").num_rows == 2 * 4
    assert len(list((remote / "plots").glob("*.png"))) == 2 and (remote / "sweep.yaml").exists()
    code, printed = run(tmp_path, SWEEP, f"file://{remote}", capsys)
    assert code == 0 and "0 to run" in printed


def test_a_cell_past_its_time_limit_fails_and_the_others_finish(ray_session, tmp_path, capsys):
    sweep = json.loads(json.dumps(SWEEP))
    sweep["run"]["cell_timeout_s"] = 20
    sweep["overrides"] = [{"adaptation": "lora", "train": {"epochs": 500}}]  # far more than 20 s
    code, printed = run(tmp_path, sweep, tmp_path / "results", capsys)
    assert code == 1 and "1 failed" in printed
    assert "FAILED tiny-gpt2__lora__" in printed and "cell_timeout_s = 20 s (in training)" in printed
    done = [p.parent.name for p in (tmp_path / "results" / "cells").glob("*/DONE")]
    assert len(done) == 1 and "__none__" in done[0]


def test_a_trial_the_local_machine_can_never_hold_is_refused_not_waited_for(ray_session, tmp_path, capsys):
    """spv_mia's view task takes a second bundle on the trial's node: at 2 CPUs a trial on this 2-CPU Ray
    instance asks for 4, which Tune would wait for for ever. The run says so in one line, before any cell."""
    sweep = json.loads(json.dumps(SWEEP))
    sweep["matrix"]["adaptation"] = ["lora"]
    sweep["attacks"] = ["loss", "spv_mia"]
    sweep["split"] |= {"population": 8}
    sweep["run"]["cpus_per_trial"] = 2
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert main(["run", str(path), "--out", str(tmp_path / "results")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "asks for 4 CPUs on one node (two bundles: the trial and its view task)" in error
    assert "this machine has 2" in error and not list((tmp_path / "results" / "cells").glob("*/DONE"))
