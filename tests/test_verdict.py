"""An audit's verdict: one test over its attacks (Holm over one-sided Mann-Whitney tests), the blind
control's shift test read first, and the smallest AUC the audit could have detected."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

import privauditor
from privauditor.orchestrator.cli import main
from privauditor.tasks.audit.verdict import attack_tests, conclusion, detectable_auc
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.stats.metrics import auc_from_ranks

from .test_audit import audit_argv


def test_attack_tests_are_the_aucs_and_holm_over_one_sided_rank_tests():
    rng = np.random.default_rng(0)
    member = np.r_[np.ones(30, bool), np.zeros(40, bool)]
    scores = {
        "strong": (member, rng.normal(size=70) + 1.5 * member),
        "weak": (member, rng.normal(size=70) + 0.3 * member),
        "none": (member, rng.normal(size=70)),
    }
    found = attack_tests(scores)
    for name, (m, s) in scores.items():
        assert found[name]["auc"] == pytest.approx(auc_from_ranks(m, s))
        assert found[name]["p"] == pytest.approx(mannwhitneyu(s[m], s[~m], alternative="greater").pvalue)
        assert found[name]["p_lower"] == pytest.approx(mannwhitneyu(s[m], s[~m], alternative="less").pvalue)
    # Holm's step-down by hand: the k-th smallest p times (3 - k), made monotone, capped at 1
    order = sorted(found, key=lambda n: found[n]["p"])
    running = 0.0
    for k, name in enumerate(order):
        running = max(running, min(1.0, (3 - k) * found[name]["p"]))
        assert found[name]["p_holm"] == pytest.approx(running)
    assert found["strong"]["p_holm"] < 0.05 < found["none"]["p_holm"]
    lower = sorted(found, key=lambda n: found[n]["p_lower"])  # the other tail: a family of its own
    running = 0.0
    for k, name in enumerate(lower):
        running = max(running, min(1.0, (3 - k) * found[name]["p_lower"]))
        assert found[name]["p_lower_holm"] == pytest.approx(running)
    assert found["strong"]["p_lower_holm"] == pytest.approx(1.0)


def test_the_detectable_auc_has_the_stated_power_by_simulation():
    """At the AUC it reports, binormal scores at these sizes are found by the one-sided Mann-Whitney test
    at 0.05 / 7 in about 80 % of 2,000 draws; more records detect smaller AUCs."""
    from scipy.stats import norm

    n, m, attacks = 40, 60, 7
    auc = detectable_auc(n, m, attacks)
    rng = np.random.default_rng(1)
    shift = np.sqrt(2) * norm.ppf(auc)
    hits = [
        mannwhitneyu(rng.normal(size=n) + shift, rng.normal(size=m), alternative="greater").pvalue
        < 0.05 / attacks
        for _ in range(2000)
    ]
    assert 0.75 < np.mean(hits) < 0.85, (auc, np.mean(hits))
    assert detectable_auc(400, 600, attacks) < auc < detectable_auc(20, 30, attacks)
    assert detectable_auc(2, 3, attacks) is None


def test_files_from_two_templates_get_the_shift_verdict_on_an_unadapted_base(tmp_path, capsys):
    """Members written from one template and non-members from another, audited on a model that saw
    neither: the blind control finds the shift and the verdict says so instead of calling it leakage."""
    names = ["Alice", "Ravi", "Chen", "Olga", "Musa", "Ines", "Tomas", "Aiko"]
    members = tmp_path / "members.jsonl"
    nonmembers = tmp_path / "nonmembers.jsonl"
    members.write_text(
        "".join(
            json.dumps({"text": f"Patient {i} named {names[i % 8]} was admitted on day {i % 28 + 1}."}) + "\n"
            for i in range(40)
        )
    )
    nonmembers.write_text(
        "".join(
            json.dumps({"text": f"Customer {i} named {names[(i + 3) % 8]} paid invoice {1000 + i} late."})
            + "\n"
            for i in range(40)
        )
    )
    out = tmp_path / "out"
    argv = [*audit_argv("tiny-gpt2", members, nonmembers, out), "--set", "attacks=[loss,zlib,min_k,blind]"]
    assert main([*argv, "--nonmembers-from", "collected"]) == 0
    printed = capsys.readouterr().out
    assert "verdict: SHIFT" in printed and "measure that shift, not leakage" in printed
    assert "collected after training" in printed
    assert "What separates them: format: digit share (members lower" in printed  # the ids, the day numbers
    assert "length: words (members higher: AUC 1.000" in printed
    assert "vocabulary: 9 of 18 common words held by different shares" in printed  # the names are shared
    assert "'admitted' 100% / 0%" in printed  # the words: printed, and in verdict.json, never in a sentence
    (audit_dir,) = (out / "cells").glob("audit__*")
    found = json.loads((audit_dir / "verdict.json").read_text())
    assert found["shift"]["detected"] and found["shift"]["p_value"] < 0.05
    assert {w["word"] for w in found["shift"]["words"]} >= {"patient", "customer", "invoice"}
    assert not {"patient", "customer", "invoice", "admitted"} & set(
        " ".join(found["conclusion"]).lower().split()
    )
    assert set(found["attacks"]) == {"loss", "zlib", "min_k"}  # the control is not in the family
    metrics = json.loads((audit_dir / "metrics.json").read_text())
    for name, test in found["attacks"].items():
        assert test["auc"] == pytest.approx(metrics[name]["auc"], abs=1e-9)


def test_no_attack_run_is_no_verdict():
    found = {
        "attacks": {},
        "leakage": False,
        "reversed": [],
        "shift": None,
        "detectable_auc": 0.7,
        "nonmembers_from": "held-out",
    }
    lines = conclusion(found)
    assert lines[0].startswith("No attack ran") and "No leakage detected" not in " ".join(lines)


@pytest.fixture(scope="module")
def leaking(tmp_path_factory):
    """A cell that memorised its members (full fine-tuning, 10 epochs: every attack's AUC near 1) and its
    split as member and non-member files, by ``privauditor export-split``."""
    tmp = tmp_path_factory.mktemp("leaking")
    config = cell_config(
        {"model": "tiny-gpt2", "adaptation": "full", "dataset": "climate"},
        ["split={members: 20, nonmembers: 20, validation: 4}", "train.epochs=10", "score.bootstrap=50",
         "attacks=[loss,zlib,min_k]"],
    )  # fmt: skip
    outcome = run_cell(config, tmp / "cells")
    assert main(["export-split", str(tmp / "cells"), outcome.cell_id, "--to", str(tmp / "split")]) == 0
    (split_file,) = (tmp / "cells" / "shared" / "splits").glob("*.json")
    ids, by_id = (
        json.loads(split_file.read_text()),
        {e.sample_id: e for e in load_dataset("climate").examples},
    )
    for part in ("members", "nonmembers", "validation"):  # the cell's own records, as it trained them
        rows = [json.loads(line) for line in (tmp / "split" / f"{part}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == ids[part]
        assert all((r["prompt"], r["target"]) == (by_id[r["id"]].prompt, by_id[r["id"]].target) for r in rows)
    assert not (tmp / "split" / "population.jsonl").exists()  # an empty part: no file
    return tmp, outcome.path / "adapter", tmp / "split" / "members.jsonl", tmp / "split" / "nonmembers.jsonl"


def audit_of(leaking, out, *extra, swap=False, adapter=True):
    tmp, saved, members, nonmembers = leaking
    files = (nonmembers, members) if swap else (members, nonmembers)
    argv = [*audit_argv("tiny-gpt2", *files, tmp / out), "--set", "attacks=[loss,zlib,min_k]"]
    return main(
        [*argv, *(["--adapter", str(saved)] if adapter else []), "--nonmembers-from", "held-out", *extra]
    )


def test_swapped_files_are_members_scoring_lower_never_nothing_detected(leaking, capsys):
    """The member and non-member files exchanged on a model that memorised its members: every attack ranks
    the 'members' below chance, which the other tail of the test reports; ``--fail-on shift`` exits 4."""
    assert audit_of(leaking, "swapped", swap=True) == 0
    printed = capsys.readouterr().out
    assert "verdict: REVERSED" in printed and "NOTHING DETECTED" not in printed
    assert "Members score lower than non-members" in printed and "look swapped" in printed
    (audit_dir,) = (leaking[0] / "swapped" / "cells").glob("audit__*")
    found = json.loads((audit_dir / "verdict.json").read_text())
    assert found["reversed"] == ["loss", "min_k", "zlib"] and not found["leakage"]
    for test in found["attacks"].values():
        assert test["auc"] < 0.2 and test["p_lower_holm"] < 0.05 < test["p_holm"]
    assert audit_of(leaking, "swapped", "--fail-on", "shift", swap=True) == 4  # found done: the same verdict
    assert audit_of(leaking, "swapped", "--fail-on", "leakage", swap=True) == 0


def test_fail_on_leakage_exits_3_on_the_leaking_model_and_0_on_its_base_with_one_json_object(leaking, capsys):
    capsys.readouterr()
    assert audit_of(leaking, "leaks", "--fail-on", "leakage", "--json") == 3
    printed = capsys.readouterr()
    found = json.loads(printed.out)  # stdout is the one object; the tables went to stderr
    assert found["finding"] == "leakage" and found["exit_code"] == 3
    assert set(found["attacks"]) == {"loss", "zlib", "min_k"} and found["attacks"]["loss"]["auc"] > 0.9
    assert len(found["attacks"]["loss"]["tpr_at_0fp_ci"]) == 2  # with its interval and FPR bound
    assert 0 < found["attacks"]["loss"]["tpr_at_0fp_fpr_bound"] < 1
    assert found["attacks"]["loss"]["p_holm"] < 0.05 and "verdict: LEAKAGE" in printed.err
    # the un-adapted base on the same files: it never saw them, so it does not tell them apart
    baseline = found["baseline"]
    assert baseline["model"] == "tiny-gpt2" and set(baseline["attacks"]) == {"loss", "zlib", "min_k"}
    assert abs(baseline["attacks"]["loss"]["auc"] - 0.5) < 0.25 < found["attacks"]["loss"]["auc"] - 0.5
    assert "Baseline: the un-adapted base (tiny-gpt2)" in printed.err
    (audited,) = privauditor.load_results(
        leaking[0] / "leaks"
    ).audits  # the report's column, beside each attack
    assert "split" not in audited.record["config"]  # an audit draws none: no defaults that did not apply
    (page,) = audited.report(pdf=False)
    text = page.read_text()
    assert "<th>baseline AUC [95 % CI]</th>" in text and "the un-adapted base, tiny-gpt2," in text
    low, high = baseline["attacks"]["loss"]["auc_ci"]
    assert f"{baseline['attacks']['loss']['auc']:.3f} [{low:.3f}, {high:.3f}]" in text
    assert audit_of(leaking, "base", "--fail-on", "any", "--json", adapter=False) == 0
    base = json.loads(capsys.readouterr().out)
    assert base["finding"] == "nothing detected" and base["exit_code"] == 0


def test_no_baseline_skips_the_base_s_pass_and_the_audit_says_so(leaking):
    assert audit_of(leaking, "nobase", "--no-baseline") == 0
    (audit_dir,) = (leaking[0] / "nobase" / "cells").glob("audit__*")
    record = json.loads((audit_dir / "cell.json").read_text())
    assert record["audit"]["baseline"] is None and not (audit_dir / "baseline").exists()
    assert json.loads((audit_dir / "verdict.json").read_text())["baseline"] is None
    assert audit_of(leaking, "nobase") == 0  # with the baseline: another audit, beside it
    assert len(list((leaking[0] / "nobase" / "cells").glob("audit__*"))) == 2
