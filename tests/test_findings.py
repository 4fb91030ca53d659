"""Findings: the Answer over blocks (synthetic results with a known order), and ``report`` writing
findings.md with the Answer, the CD diagram, controls and the exploratory families on real cells."""

from __future__ import annotations

import base64
import gzip
import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.report.findings import findings
from privauditor.orchestrator.report.plots import pareto
from privauditor.orchestrator.report.summary import final
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.infra.results import check_results_dir
from privauditor.tasks.spec.config import cell_config

LEVELS = {"none": 0.50, "prompt": 0.53, "lora": 0.60, "full": 0.70, "head": 0.76}
#: one row of a rendered headline table: rank, technique, mean AUC, mean rank [CI]
TABLE_CELLS = r"<tr>" + r"<td[^>]*>([^<]*)</td>" * 15 + r"</tr>"
TABLE_ROW = r"<tr><td>(\d+)</td><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td></tr>"
CLASSES = {"prompt": "prompt_based", "lora": "adapters", "full": "full", "head": "head"}


def synthetic(out, seeds=(0,)):
    """Leaderboard rows of 6 blocks (3 models x 2 datasets) whose techniques keep one order, plus a
    technique on one model only; a sweep.yaml with a hypothesis of that order formed on seed 0."""
    rng = np.random.default_rng(0)
    rows = []
    for model in ("m1", "m2", "m3"):
        for dataset in ("d1", "d2"):
            shift = rng.normal(0, 0.03)
            techniques = dict(LEVELS) | ({"llama_adapter": 0.55} if model == "m1" else {})
            for name, auc in techniques.items():
                for seed in seeds:
                    value = auc + shift + rng.normal(0, 0.002)
                    epochs = [0] if name == "none" else [0, 1, 4]
                    for epoch in epochs:
                        rows.append({
                            "cell_id": f"{model}__{name}__{dataset}__s{seed}__x", "model": model, "adaptation": name,
                            "dataset": dataset, "seed": seed, "epoch": epoch, "step": epoch * 10,
                            "best": epoch == epochs[-1], "attack": "loss", "access": "black-box",
                            "auc": 0.5 + (value - 0.5) * epoch / 4 if epoch else 0.5, "auc_ci_low": value - 0.05,
                            "auc_ci_high": value + 0.05, "utility_loss": 6.4 - epoch, "defence": "none",
                            "trainable_fraction": 0.4 if name == "head" else 1.0 if name == "full" else 0.02,
                        })  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    check_results_dir(out)  # the marker: report reads only folders privauditor wrote
    hypothesis = {"attack": "loss", "checkpoint": "last", "classes": CLASSES,
                  "order": ["prompt_based", "adapters", "full", "head"], "formed_on": {"seeds": [0]}}  # fmt: skip
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "synthetic", "hypothesis": hypothesis}))
    for cell_id in {r["cell_id"] for r in rows}:
        (out / "cells" / cell_id).mkdir(parents=True, exist_ok=True)
        model, _, dataset, seed = cell_id.split("__")[:4]
        config = {"model": model, "dataset": dataset, "seed": int(seed[1:]), "base": f"sha256:{model}"}
        (out / "cells" / cell_id / "cell.json").write_text(
            json.dumps({"versions": {}, "checkpoints": [], "config": config})
        )
    return rows


def test_the_answer_ranks_complete_blocks_with_its_tests_first(tmp_path):
    text = findings(tmp_path, synthetic(tmp_path))
    answer = text.split("## Answer", 1)[1].split("\n## ", 1)[0]
    assert text.index("## Answer") < text.index("## Strongest attack per block") < text.index("## Controls")
    assert len(answer.strip().splitlines()) <= 40
    table = [
        line.split("|")[2].strip()
        for line in answer.splitlines()
        if line.startswith("| ") and "rank" not in line
    ]
    assert table == ["head", "full", "lora", "prompt"]  # llama_adapter is partial, `none` is the control
    assert "6 complete (model, dataset) blocks, 1 seed each" in answer
    assert "| 1 | head | head | 40 % | " in answer and "| 2 | full | full | 100 % |" in answer
    # ranks print their range over blocks, never a bootstrap interval called 95 %
    assert "| mean rank (range over blocks) |" in answer and "95 % CI over blocks" not in answer
    assert answer.count("| 1.0 (1–1) |") == 1 and "| 4.0 (4–4) |" in answer
    # 4 techniques in the same order in 6 blocks: Friedman chi2(3) = 18, p = 4.4e-4 (chi-square, df 3)
    assert "Friedman χ²(3) = 18.0, p = 0.00044" in answer
    # Wilcoxon over 6 blocks: p >= 2 / 2^6 = 0.031 for every pair, Holm over 6 pairs: nothing survives
    assert (
        "Holm over all 6 pairs: 0 significant" in answer
        and "the smallest p 6 blocks allow is 0.0312" in answer
    )
    assert "Not established: any single pair of techniques (Wilcoxon–Holm)" in answer
    # Page's L of the written order: perfect agreement over 6 blocks; formed on seed 0, so exploratory
    assert "prompt_based < adapters < full < head" in answer and "Page's L = 180.0" in answer
    assert "**exploratory**" in answer and "Suggested, not established: the class order" in answer
    assert "`llama_adapter` is in 2 of the blocks" in answer
    assert (tmp_path / "plots" / "cd_loss_last.png").stat().st_size > 1000
    assert "![critical differences](plots/cd_loss_last.png)" in answer
    assert "No block has two seeds or more" in text


def test_two_seeds_give_every_pair_a_t_interval_with_holm_named(tmp_path):
    text = findings(tmp_path, synthetic(tmp_path, seeds=(0, 1)))
    assert "1-2 seeds each" not in text and "2 seeds each" in text
    section = text.split("## Across seeds (exploratory)", 1)[1].split("\n## ", 1)[0]
    assert "p (Holm over the block's pairs)" in section
    pairs = [line for line in section.splitlines() if line.startswith("| m") and "model" not in line]
    assert len(pairs) == 4 * 6 + 2 * 10  # every pair: 4 trained techniques; 5 on m1 (llama_adapter)
    assert sum(" − " in line for line in pairs) == len(pairs)


def test_a_technique_under_two_settings_is_ranked_on_their_mean_and_its_trajectories_never_mix(tmp_path):
    """A sweep changed and rerun into one folder: `lora` in block (m1, d1) also under a second setting of 2
    epochs whose last AUC is 0.9. Its value there is the mean of the two settings' last checkpoints (not the
    checkpoint of the largest step over both), as the board computes it; the paired reads leave it out."""
    from privauditor.orchestrator.board.ranked import block_values
    from privauditor.orchestrator.report import blocks as blk

    rows = [r | {"setting": "a"} for r in synthetic(tmp_path)]
    first = next(
        r for r in rows if (r["model"], r["dataset"], r["adaptation"], r["epoch"]) == ("m1", "d1", "lora", 4)
    )
    rows += [first | {"setting": "b", "cell_id": "m1__lora__d1__s0__b", "epoch": e, "step": 5 * e, "auc": a}
             for e, a in ((0, 0.5), (2, 0.9))]  # fmt: skip
    (tmp_path / "cells" / "m1__lora__d1__s0__b").mkdir()
    (tmp_path / "cells" / "m1__lora__d1__s0__b" / "cell.json").write_text(json.dumps({"versions": {}}))
    values = blk.block_values(rows, "loss", "last")
    assert values[("m1", "d1")]["lora"] == pytest.approx((first["auc"] + 0.9) / 2)
    assert values == block_values(rows)  # the board's value is the same function's
    assert "lora" not in blk.trajectories(rows, "loss")[("m1", "d1")] and blk.several(rows, "loss") == {
        "lora": 1
    }
    answer = findings(tmp_path, rows).split("## Answer", 1)[1].split("\n## ", 1)[0]
    assert "Run under more than one setting in a block: `lora` (1 block)" in answer
    assert "6 complete (model, dataset) blocks, 1 seed each" in answer


def test_the_pareto_frontier_keeps_the_points_nothing_beats_on_both_axes():
    points = [(3.0, 0.7), (4.0, 0.6), (5.0, 0.65), (6.0, 0.5), (3.0, 0.8)]
    assert pareto(points) == [(3.0, 0.7), (4.0, 0.6), (6.0, 0.5)]


@pytest.mark.slow
def test_report_writes_findings_with_the_answer_controls_and_plots(tmp_path, capsys, rendered):
    out = tmp_path / "results"
    sizes = ["split.members=24", "split.nonmembers=24", "split.validation=8", "train.max_length=48",
             "train.checkpoints=[0,0.5,1,3]", "attacks=[loss,zlib,blind]", "attack_params.blind.permutations=20"]  # fmt: skip
    for dataset in ("sql", "finance"):
        for adaptation in ("none", "full", "lora", "prompt"):
            settings = {"model": "tiny-gpt2", "adaptation": adaptation, "dataset": dataset}
            run_cell(cell_config(settings, sizes), out)
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    text = (out / "findings.md").read_text()
    assert text in printed
    for heading in ("## Answer", "## Strongest attack per block", "## Other views (exploratory)",
                    "### At matched utility", "## AUC at equal epochs", "## Inside each split", "## Controls",
                    "## Caveat"):  # fmt: skip
        assert heading in text
    assert "2 complete (model, dataset) blocks" in text and "epoch 0 | epoch 0.5 | epoch 1 | epoch 3" in text
    assert "Holm within each of the 2 (model, dataset, seed) groups over that group's pairs" in text
    assert (out / "plots" / "cd_loss_last.png").stat().st_size > 0
    assert "blind AUC" in text and "No block has two seeds or more" in text
    assert (out / "plots" / "privacy_utility" / "tiny-gpt2__sql.png").stat().st_size > 0
    matched = text.split("### At matched utility", 1)[1].split("\n## ", 1)[0]
    assert "no common utility level" in matched or "Every reading at the level" in matched
    assert "~[" not in matched  # per-sample scores at hand: DeLong intervals, not interpolated bounds
    # the leaderboard page links its images (files beside it) instead of embedding them, and renders
    page = out / "leaderboard.html"
    html = page.read_text()
    sources = re.findall(r'<img alt="[^"]*" src="([^"]+)"', html)
    assert "data:image" not in html and "privacy_utility.png" in sources and len(sources) >= 4
    assert all((out / src).is_file() for src in sources) and page.stat().st_size < 1_000_000
    dom = rendered(page)
    assert len(re.findall(r"<img [^>]*loading=\"lazy\"", dom)) == len(sources)
    # every row is in the page, each cell's last checkpoint shown unless asked; filters from the address
    total = len(pq.read_table(out / "leaderboard.parquet"))
    last = len(final(pq.read_table(out / "leaderboard.parquet").to_pylist()))
    assert f'id="row-count">{last} of {total} rows<' in dom and 'id="row-page">page 1 of 1<' in dom
    picked = rendered(page, "attack=zlib&dataset=sql&every=1")
    shown = re.findall(TABLE_CELLS, picked.split('id="row-table"', 1)[1].split("</table>", 1)[0])
    assert len(shown) == 4 * 4 - 3 and {(r[2], r[6]) for r in shown} == {("sql", "zlib")}  # `none`: epoch 0
    assert '<td class="num">' in picked  # numbers right-aligned, to compare down a column
    # one headline: findings.md's Answer (which `run` and `report` print), the page and the board site
    answer = text.split("## Answer", 1)[1].split("\n## ", 1)[0]
    shown = [
        [c.strip() for c in line.split("|")[1:-1]] for line in answer.splitlines() if line.startswith("| ")
    ]
    headline = {(c[1], c[-2], c[-1]) for c in shown if c[0] != "rank"}  # technique, AUC, rank [95 % CI]
    assert len(headline) == 3  # full, lora, prompt over the 2 blocks (`none` is the control)
    ranking = html.split('<h2 id="headline">', 1)[1].split("</table>", 1)[0]
    assert {(t, a, r) for _, t, a, r in re.findall(TABLE_ROW, ranking)} == headline
    store, site = tmp_path / "store", tmp_path / "site"
    assert main(["board", "add", str(out), str(store)]) == 0
    assert main(["board", "build", str(store), "--out", str(site)]) == 0
    board = (site / "index.html").read_text().split("<h2>Techniques</h2>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(
        r"<tr><td>\d+</td><td><a [^>]*>([^<]+)</a></td><td>[^<]*</td><td>([^<]+)</td><td>([^<]+)</td>", board
    )
    assert set(rows) == headline


def test_one_headline_per_technique_on_the_page_and_in_the_answer(tmp_path):
    """leaderboard.html's first table is findings.md's ranking (same attack, checkpoint and blocks), and the
    per-adaptation means leave a model-free control out (it never reads the model)."""
    from privauditor.orchestrator.report.html import headline
    from privauditor.orchestrator.report.summary import summary

    rows = synthetic(tmp_path)
    blind = [r | {"attack": "blind", "access": "model-free", "auc": 0.99} for r in rows]
    answer = findings(tmp_path, rows).split("## Answer", 1)[1].split("\n## ", 1)[0]
    page = headline(tmp_path, rows + blind)
    for line in answer.splitlines():
        if line.startswith("| ") and "rank" not in line:
            cells = [c.strip() for c in line.split("|")[1:-1]]  # rank, technique, class, trainable, AUC, rank
            assert f"<td>{cells[1]}</td><td>{cells[4]}</td>" in page
    means = {r[0]: r[1] for r in summary(rows + blind, "adaptation")}
    assert means == {r[0]: r[1] for r in summary(rows, "adaptation")}  # the 0.99 control changes nothing
    # the page embeds every row, each cell's last checkpoint flagged (what it shows unless asked)
    from privauditor.orchestrator.report.html import leaderboard_html

    full = [r | {"trainable_params": 10, "tpr_at_1pct_fpr": None, "tpr_at_0fp": None} for r in rows]
    page = leaderboard_html(tmp_path, full)
    data = page.split('<script type="application/octet-stream" id="row-data">', 1)[1].split("</script>", 1)[0]
    embedded = json.loads(gzip.decompress(base64.b64decode(data)))
    assert len(embedded) == len(rows) and sum(r[0] for r in embedded) == len(final(rows)) < len(rows)


def test_the_extraction_section_gives_each_technique_its_added_rate_with_an_interval(tmp_path):
    rows = synthetic(tmp_path)
    for r in rows:  # members extract in proportion to the leak; the base's own rate is 0.1 everywhere
        gain = round(2 * (r["auc"] - 0.5), 4)
        for kind in ("greedy", "sampled"):
            r |= {f"extraction_{kind}_members": 0.1 + gain, f"extraction_{kind}_nonmembers": 0.1,
                  f"extraction_{kind}_difference": gain}  # fmt: skip
    text = findings(tmp_path, rows)
    section = text.split("## Extraction", 1)[1].split("\n## ", 1)[0]
    assert text.index("## AUC at equal epochs") < text.index("## Extraction") < text.index("## Controls")
    full = next(line for line in section.splitlines() if line.startswith("| full |"))
    cells = [r for r in rows if r["adaptation"] == "full" and r["epoch"] == 4]
    gains = [r["extraction_greedy_difference"] for r in cells]
    half = 2.571 * np.std(gains, ddof=1) / np.sqrt(6)  # t(0.975, 5) over 6 cells
    assert full.split("|")[2].strip() == "6"
    assert f"{np.mean(gains):.3f} [{np.mean(gains) - half:.3f}, {np.mean(gains) + half:.3f}]" in full
    assert "greedy: Spearman's ρ over the 6 techniques 1.00" in section  # the same order as the AUC's
    assert "Mean greedy difference at each checkpoint" in section and "PII fields: " not in section
    assert "## Extraction" not in findings(tmp_path, synthetic(tmp_path))  # results that predate it
