"""Findings: matched utility's rule, the Pareto frontier, and ``report`` writing findings.md with
controls, paired significance and the privacy–utility plots."""

from __future__ import annotations

import pytest

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.findings import at_level, matched_level
from privauditor.orchestrator.plots import pareto
from privauditor.tasks.cell import run_cell
from privauditor.tasks.config import cell_config


def point(epoch, nll, auc):
    return {"epoch": epoch, "utility_loss": nll, "auc": auc}


def test_matched_utility_reads_each_trajectory_where_it_first_reaches_the_common_level():
    fast = [point(1, 5.0, 0.60), point(2, 3.0, 0.70), point(3, 3.5, 0.75)]  # best 3.0, then overfits
    slow = [point(1, 6.0, 0.52), point(2, 5.0, 0.55), point(3, 4.0, 0.58)]  # best 4.0
    level = matched_level({"fast": fast, "slow": slow, "none": [point(0, 7.0, 0.5)]})
    assert level == 4.0  # the best utility both trained techniques reach; `none` is left out
    assert at_level(slow, level) == (0.58, False)
    assert at_level(fast, level) == (pytest.approx(0.65), False)  # halfway from NLL 5 to 3
    # a trajectory crossing the level twice is read at its first crossing
    twice = [point(1, 5.0, 0.5), point(2, 3.0, 0.6), point(3, 5.0, 0.7), point(4, 3.0, 0.8)]
    assert at_level(twice, 4.0) == (pytest.approx(0.55), False)
    # one already below the level at its first checkpoint is read there, and flagged
    assert at_level([point(1, 2.0, 0.9), point(2, 1.0, 0.95)], 4.0) == (0.9, True)


def test_the_pareto_frontier_keeps_the_points_nothing_beats_on_both_axes():
    points = [(3.0, 0.7), (4.0, 0.6), (5.0, 0.65), (6.0, 0.5), (3.0, 0.8)]
    assert pareto(points) == [(3.0, 0.7), (4.0, 0.6), (6.0, 0.5)]


def test_report_writes_findings_with_controls_significance_and_plots(tmp_path, capsys):
    out = tmp_path / "results"
    sizes = ["split.members=24", "split.nonmembers=24", "split.validation=8", "train.max_length=48",
             "train.checkpoints=[1,3]", "attacks=[loss,zlib,blind]", "attack_params.blind.permutations=20"]  # fmt: skip
    for adaptation in ("none", "full", "lora"):
        run_cell(cell_config({"model": "tiny-gpt2", "adaptation": adaptation, "dataset": "sql"}, sizes), out)
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    text = (out / "findings.md").read_text()
    assert text in printed
    for heading in ("## AUC at equal epochs", "### At the last checkpoint (equal epochs)",
                    "### At each cell's best-validation checkpoint", "## AUC at matched utility",
                    "## Controls", "## Caveat"):  # fmt: skip
        assert heading in text
    assert "| full |" in text and "| lora |" in text and "epoch 1 | epoch 3" in text
    assert "differences significant at 0.05" in text and "of 3 differences" in text  # 3 pairs per view
    # every significant pair is written winner first, its difference and CI as winner − loser
    significant = [
        line.split("|") for line in text.splitlines() if " > " in line and line.startswith("| tiny")
    ]
    assert significant  # full fine-tuning, 3 epochs, 24 members: told apart from `none`
    for cells in significant:
        low, high = (float(x) for x in cells[6].strip(" []").split(","))
        assert 0 < low <= float(cells[5]) <= high, cells
    assert "blind AUC" in text and "One seed: the seed-level CI of every difference is null" in text
    assert (out / "plots" / "privacy_utility" / "tiny-gpt2__sql.png").stat().st_size > 0
    html = (out / "leaderboard.html").read_text()
    assert "Privacy–utility over checkpoints" in html


def test_with_two_seeds_findings_give_seed_level_intervals(tmp_path):
    from privauditor.orchestrator.findings import findings
    from privauditor.orchestrator.leaderboard import build

    out = tmp_path / "results"
    sizes = ["split.members=16", "split.nonmembers=16", "split.validation=4", "train.max_length=32",
             "train.checkpoints=[1,2]", "attacks=[loss]"]  # fmt: skip
    for seed in (0, 1):
        for adaptation in ("none", "full"):
            settings = {"model": "tiny-gpt2", "adaptation": adaptation, "dataset": "sql", "seed": seed}
            run_cell(cell_config(settings, sizes), out)
    text = findings(out, build(out))
    assert "2 seed(s)" in text and "## Across seeds (last checkpoint)" in text
    assert "Seed-level 95% CIs (seeds, then samples)" in text and "One seed" not in text
