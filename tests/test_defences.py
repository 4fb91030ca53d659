"""A small ``defences`` sweep on the canary setting (tiny-gpt2, full fine-tuning, 16 members, 4 of them
trained four times, 40 epochs): without a defence the LOSS attack finds the members, DP-SGD at ε = 1 leaves it at chance, a run that
claims DP with the noise switched off is caught by the text canaries' audit, one that adds a quarter of
the noise it claims is caught by 5,000 gradient canaries and the honest one is not, and members trained
four times score above those trained once. The noise-off control claims ε = 0.1: the audit can only
contradict a claim below its ceiling, which 12 singletons and 16 non-members put at about 0.43."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from privauditor.orchestrator.cli import main

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SWEEP = {
    "name": "defences-canary",
    "matrix": {
        "model": ["tiny-gpt2"],
        "adaptation": ["full"],
        "dataset": ["finance"],
        "defence": [
            "none",
            {"dp": {"epsilon": 1, "gradient_canaries": 5000}},
            {"dp": {"epsilon": 1, "gradient_canaries": 5000, "noise_scale": 0.25}},
            {"dp": {"epsilon": 0.1, "noise": False}},
        ],
    },
    "attacks": ["loss", "zlib"],
    "split": {
        "members": 16,
        "nonmembers": 16,
        "validation": 8,
        "repeated": 0.25,
        "repeats": 4,
        "canaries": {"kind": "designed", "count": 64, "repeats": [1], "inclusion": 0.5},
    },
    "train": {"checkpoints": [10, 40], "lr": 0.003},
    "run": {"cpus_per_trial": 1, "max_failures": 0},
}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    ray = pytest.importorskip("ray")
    folder = tmp_path_factory.mktemp("defences")
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main(["run", str(path), "--out", str(folder / "out")]) == 0
    finally:
        ray.shutdown()
    assert main(["report", str(folder / "out")]) == 0
    rows = pq.read_table(folder / "out" / "leaderboard.parquet").to_pylist()
    return folder / "out", {(r["cell_id"].split("__")[1], r["epoch"], r["attack"]): r for r in rows}


def test_dp_at_epsilon_one_leaves_the_canary_at_chance(swept):
    out, rows = swept
    plain, private = rows[("full", 40, "loss")], rows[("full+dp-e1", 40, "loss")]
    assert plain["auc"] >= 0.95 and plain["defence"] == "none" and plain["epsilon"] is None
    assert private["auc_ci_low"] <= 0.5 <= private["auc_ci_high"], private["auc"]
    assert private["defence"] == "dp" and private["epsilon_target"] == 1.0
    assert 0.97 <= private["epsilon"] <= 1.0 and rows[("full+dp-e1", 10, "loss")]["epsilon"] < 0.5
    assert private["eps_ceiling"] > 0 and not private["dp_violation"]
    record = json.loads((out / "cells" / private["cell_id"] / "cell.json").read_text())["defence"]
    assert abs(record["epsilon_second_accountant"] / record["epsilon"] - 1) < 0.05
    assert record["noise_multiplier"] > 1 and record["accountant"].startswith("rdp (opacus")
    findings = (out / "findings.md").read_text()
    ceiling = f"{private['eps_ceiling']:.3f}"
    assert "## Defences" in findings and f"- ({ceiling})" in findings  # no bound at ε = 1, and its ceiling
    # beyond membership, under DP: the PII fields' reconstruction beside the AUC
    assert "PII fields given back (difference)" in findings
    # (seed 0: full fine-tuning gives back 7.7 % more of its members' fields than of the non-members', DP at ε 1 none)
    assert private["pii_reconstructed_difference"] <= plain["pii_reconstructed_difference"]


def test_the_audit_catches_dp_claimed_without_noise(swept):
    out, rows = swept
    control = rows[("full+dp-e0.1-nonoise", 40, "loss")]
    assert control["auc"] >= 0.95 and control["dp_violation"] and control["one_run_kind"] == "designed"
    assert control["eps_one_run"] > control["epsilon"] and control["epsilon"] <= 0.1
    assert control["one_run_canaries"] == 64 and control["eps_one_run"] <= control["eps_one_run_ceiling"]
    findings = (out / "findings.md").read_text()
    assert "## DP violations" in findings and f"`{control['cell_id']}` epoch 40: ε ≥" in findings
    audit = findings.split("## One-run DP audit")[1].split("\n## ")[0]
    assert "| full+dp-e0.1-nonoise | 0.1 |" in audit and audit.count("| yes |") == 2  # and the planted bug
    assert not any(r["dp_violation"] for k, r in rows.items() if "noise" not in k[0])
    honest = rows[("full+dp-e1", 40, "loss")]
    assert honest["eps_one_run"] is not None and honest["eps_one_run"] <= honest["epsilon"]


def test_members_trained_four_times_score_above_singletons(swept):
    out, rows = swept
    early = rows[("full", 10, "loss")]
    assert early["auc_repeated_vs_singleton"] >= 0.9
    record = json.loads((out / "cells" / early["cell_id"] / "cell.json").read_text())
    assert sorted(record["repeats"].values()) == [4] * 4
    metrics = json.loads(
        (
            out / "cells" / early["cell_id"] / "checkpoints" / f"step-{early['step']}" / "metrics.json"
        ).read_text()
    )
    assert metrics["loss"]["n_members"] == 16 and set(metrics["loss"]["auc_by_repeats"]) == {"1", "4"}
    assert "## Duplication" in (out / "findings.md").read_text()


def test_gradient_canaries_catch_a_quarter_of_the_noise_and_pass_the_honest_run(swept):
    """The planted bug (σ/4 added, σ's ε claimed) is a violation of the gradient canaries' one-run bound;
    the same audit of the honest run stays below its claim (seed 0: 1.60 and 0.28 against 0.996)."""
    out, rows = swept
    planted, honest = rows[("full+dp-e1-noise0.25", 40, "loss")], rows[("full+dp-e1", 40, "loss")]
    assert planted["dp_violation"] and planted["one_run_kind"] == "gradient"
    assert planted["eps_one_run"] > planted["epsilon"] >= 0.97 and planted["one_run_canaries"] == 5000
    assert planted["eps_one_run"] <= planted["eps_one_run_ceiling"]
    assert not honest["dp_violation"] and honest["eps_one_run"] < 0.5 * honest["epsilon"]
    record = json.loads((out / "cells" / planted["cell_id"] / "cell.json").read_text())
    assert (
        record["defence"]["gradient_canaries"] == 5000
        and 2300 < record["defence"]["gradient_canaries_in"] < 2700
    )
    audit = record["checkpoints"][-1]["extraction"]["one_run"]
    assert (
        set(audit["kinds"]) == {"designed", "gradient"} and audit["correction"] == "Bonferroni over 2 kinds"
    )
    findings = (out / "findings.md").read_text()
    assert (
        f"`{planted['cell_id']}` epoch 40: ε ≥ {planted['eps_one_run']:.3f} over 5000 `gradient`" in findings
    )
    by_technique = findings.split("### ε̂ / ε at ε = 1, by technique")[1].split("###")[0]
    kinds = json.loads((out / "cells" / honest["cell_id"] / "cell.json").read_text())["checkpoints"][-1]
    kinds = kinds["extraction"]["one_run"]["kinds"]
    ratios = " | ".join(f"{kinds[k]['eps_lower'] / 1.0:.3f}" for k in ("designed", "gradient"))
    assert f"| full | 1 | {ratios} |" in by_technique  # the honest cell alone: controls are left out
