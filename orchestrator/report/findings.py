"""Findings: what a results folder says about the paper's question, answer first.

``privauditor report DIR [--attack loss]`` writes ``findings.md`` into the folder and prints it. It opens
with the **Answer** (:mod:`.answer`): the techniques ranked over complete (model, dataset) blocks under
one attack at one view (the sweep hypothesis's checkpoint, else each cell's last), with Friedman's test,
pairwise Wilcoxon–Holm tests and their critical-difference diagram, the sweep's one confirmatory test
(Page's L of its class order, :mod:`.hypothesis`) and random-effects estimates of how much more each class
leaks. Everything after it is exploratory, and each family of tests says what it corrects over:

- **strongest attack per block**: the attack with the highest mean AUC over the ranked techniques;
- **other views**: the same battery at each cell's best-validation checkpoint (or last) and at **matched
  utility** (:mod:`.matched`: levels at fixed distances below the base's validation NLL, each technique's
  AUC interpolated where it first crosses one, and every pair tested for equivalence within ±0.02 AUC by
  TOST and for a difference by a paired t test over blocks);
- **equal epochs**: every technique's mean AUC at each checkpoint of the common schedule;
- **inside each split**: DeLong's paired test of every pair of techniques on the same members and
  non-members, Holm within each (model, dataset, seed) group: conditional on the trained models;
- **across seeds**: per block and pair, the t-interval of the mean of per-seed AUC differences, Holm over
  the block's pairs;
- **controls**: the model-free ``blind`` attack's permutation test per split and the un-adapted base.

DP cells, DP violations (listed first, as bugs) and duplication have their own sections
(:mod:`privauditor.orchestrator.report.findings_tables`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from privauditor.orchestrator.sweepfile.hypothesis import of_results
from privauditor.tasks.infra.results import Results

from . import blocks as blk
from .against import against
from .answer import answer
from .battery import ALPHA, Battery, battery_of
from .exposure import exposure_section
from .extraction import extraction_section
from .findings_tables import defence_table, duplication_table, one_run_table, violations, where_ran
from .formats import epoch_table, markdown_table
from .formats import number as _fmt
from .headline import ATTACK, view_of
from .matched import matched_section
from .row_schema import Row, trained_rows

PRIMARY_ATTACK = ATTACK  # the headline's (:mod:`.headline`)

CAVEAT = (
    "These bases have about a million parameters and were pre-trained for minutes on a small corpus; a "
    "7-B model has seen far more text, memorises faster per epoch and starts from a much lower loss on "
    "these records. What transfers is the method (blocks as units, equal budgets, matched utility, paired "
    "tests, controls); the size of each AUC, and possibly the order of techniques, need re-measuring at scale."
)


def findings(
    out: Path, rows: list[Row], attack: str = PRIMARY_ATTACK, other: tuple[str, list[Row]] | None = None
) -> str:
    """``findings.md`` of the results folder ``out`` whose leaderboard rows are ``rows``; ``other``, a
    (name, rows) pair of another results folder, adds a section ranking both alike (:mod:`.against`)."""
    from .shipped import shipped_section

    out = Path(out)
    as_shipped = shipped_section(out, rows, attack)
    rows = trained_rows(rows)  # every comparison of techniques reads the models as trained
    hypothesis, registration = of_results(out, rows)
    own = hypothesis is not None and hypothesis.attack == attack
    view = view_of(hypothesis, attack)
    found = blk.trajectories(rows, attack)
    runs = blk.by_setting(rows, attack)
    main, picked = battery_of(rows, attack, view, hypothesis if own else None)
    page = (
        main
        if own
        else (
            battery_of(rows, hypothesis.attack, hypothesis.checkpoint, hypothesis)[0] if hypothesis else None
        )
    )
    seeds = [
        len({s for settings in runs[b].values() for by in settings.values() for s in by})
        for b in (main.blocks if main else [])
    ] or [0]
    context = {
        "attack": attack,
        "view": view,
        "seeds": seeds,
        "fractions": blk.fractions(rows),
        "hypothesis": hypothesis,
        "registration": registration,
        "page": page,
        "picked": picked,
        "several": blk.several(rows, attack),
        "attempts": _attempts(out, rows, hypothesis, registration, page),
    }
    lines = ["# Findings", ""] + violations(rows) + answer(out, main, context)
    if other is not None:
        lines += against(rows, other[1], (out.name, other[0]), attack, view)
    extra = defence_table(rows, attack) + one_run_table(out, rows) + duplication_table(out, rows, attack)
    extra += as_shipped + where_ran(out, rows)
    if not found:
        return "\n".join(lines + [f"No finished undefended cell ran `{attack}`.", ""] + extra)
    lines += _strongest(rows, view, main)
    lines += _other_views(out, rows, attack, view, found)
    lines += _equal_epochs(found)
    lines += extraction_section(rows, attack)
    lines += exposure_section(out, rows)
    lines += _within_splits(out, picked, view)
    lines += _across_seeds(picked, view)
    lines += _controls(out, rows, attack)
    return "\n".join(lines + extra + ["## Caveat", "", CAVEAT, ""])


def _attempts(out: Path, rows: list[Row], hypothesis: Any, registration: Any, page: Any) -> int:
    """Log this run's confirmatory test in ``hypothesis_attempts.jsonl`` (a pre-registered hypothesis whose
    Page test ran) and return how many attempts the folder's log holds for the hypothesis."""
    from privauditor.orchestrator.sweepfile.attempts import attempts, log_attempt

    if hypothesis is None:
        return 0
    if registration is not None and registration.confirmatory and page is not None and page.page is not None:
        return log_attempt(out, hypothesis, {r["cell_id"] for r in rows}, page.page)
    return attempts(out, hypothesis)


def _strongest(rows: list[Row], view: str, main: Battery | None) -> list[str]:
    """Per block, the attack with the highest mean AUC over the ranked techniques (model-free left out)."""
    if main is None:
        return []
    attacks = sorted({r["attack"] for r in rows if r["access"] != "model-free"})
    means: dict[Any, dict[str, tuple[float, str]]] = defaultdict(dict)
    for attack in attacks:
        values = blk.block_values(rows, attack, view)
        for block in main.blocks:
            here = values.get(block, {})
            if all(here.get(n) is not None for n in main.names):
                aucs = {n: here[n] for n in main.names}
                means[block][attack] = (float(np.mean(list(aucs.values()))), max(aucs, key=aucs.__getitem__))
    body = []
    for block in main.blocks:
        if means[block]:
            best = max(means[block], key=lambda a: means[block][a][0])
            left_out = ", ".join(f"`{a}`" for a in attacks if a not in means[block]) or "-"
            body.append([*block, f"`{best}`", _fmt(means[block][best][0]), means[block][best][1], left_out])
    return [
        "## Strongest attack per block",
        "",
        f"Mean AUC over the {len(main.names)} ranked techniques at the {view} checkpoint (model-free attacks left out); "
        "every attack compared over the same cells: one without a row for some ranked technique (it abstained "
        "on every text there, or was skipped) is left out of that block and named:",
        "",
        markdown_table(
            ["model", "dataset", "strongest attack", "mean AUC", "leakiest technique under it", "left out"],
            body,
        ),
        "",
    ]


def _summary(found: Battery) -> list[str]:
    body = [
        [i, n, _fmt(found.mean_auc[n]), f"{found.mean_rank[n]:.1f}"] for i, n in enumerate(found.names, 1)
    ]
    n = len(found.blocks)
    tests = f"{n} complete block{'s' if n > 1 else ''}"
    if found.friedman:
        tests += f"; Friedman p = {found.friedman['p_value']:.2g}"
    if found.pairs:
        tests += f"; Wilcoxon–Holm: {len(found.significant)} of {len(found.pairs)} pairs significant"
    else:
        tests += ": no test over one block"
    return [tests + ".", "", markdown_table(["rank", "technique", "mean AUC", "mean rank"], body), ""]


def _other_views(
    out: Path, rows: list[Row], attack: str, view: str, found: blk.Trajectories[Row]
) -> list[str]:
    other = "best" if view == "last" else "last"
    lines = ["## Other views (exploratory)", ""]
    battery, _ = battery_of(rows, attack, other)
    title = "each cell's best-validation checkpoint" if other == "best" else "each cell's last checkpoint"
    if battery is not None:
        lines += [f"### At {title}", ""] + _summary(battery)
    lines += matched_section(found, out)
    return lines


def _equal_epochs(found: blk.Trajectories[Row]) -> list[str]:
    by_epoch: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for techniques in found.values():
        for name, seeds in techniques.items():
            for points in seeds.values():
                for r in points:
                    by_epoch[name][blk.measured(r, "epoch")].append(blk.measured(r, "auc"))
    return [
        "## AUC at equal epochs",
        "",
        "Mean AUC over every split at each checkpoint (epoch 0: the technique's initial state):",
        "",
        epoch_table(by_epoch),
        "",
    ]


def _within_splits(out: Path, picked: blk.Picked[Row], view: str) -> list[str]:
    """DeLong + Holm over every pair of each (block, seed) group's techniques scored on the same samples."""
    from privauditor.tasks.stats.significance import paired_comparisons

    groups, tested, significant = 0, 0, []
    for block in sorted(picked):
        for seed in sorted({s for by in picked[block].values() for s in by}):
            rows = {n: by[seed] for n, by in picked[block].items() if seed in by}
            loaded = {n: blk.scores(out, r) for n, r in rows.items()}
            by_samples: dict[frozenset, list[str]] = defaultdict(list)
            for name, found in loaded.items():
                if found:
                    by_samples[frozenset(found)].append(name)
            for names in by_samples.values():
                if len(names) < 2:
                    continue
                pair = blk.aligned(out, [rows[n] for n in names])
                assert pair is not None, "grouped above by the samples their scores share"
                member, stacked = pair
                tests = paired_comparisons(member, dict(zip(names, stacked, strict=True)), ALPHA)
                groups, tested = groups + 1, tested + len(tests)
                for t in tests:
                    if t["significant"]:
                        flip = t["difference"] < 0  # written as higher − lower
                        high, low = (t["b"], t["a"]) if flip else (t["a"], t["b"])
                        ci = (-t["ci_high"], -t["ci_low"]) if flip else (t["ci_low"], t["ci_high"])
                        significant.append(
                            [
                                *block,
                                seed,
                                f"{high} > {low}",
                                f"{abs(t['difference']):.3f}",
                                f"[{ci[0]:.3f}, {ci[1]:.3f}]",
                                f"{t['p_holm']:.2g}",
                            ]
                        )
    lines = [
        "## Inside each split (exploratory, conditional on the trained models)",
        "",
        f"DeLong's paired test at the {view} checkpoint, Holm within each of the {groups} (model, dataset, seed) "
        f"groups over that group's pairs: {len(significant)} of the {tested} pairs are significant at {ALPHA} "
        "within their own group. These say the trained models differ on this split, not that the techniques "
        "do: one trained model per cell.",
        "",
    ]
    if significant:
        header = [
            "model",
            "dataset",
            "seed",
            "order",
            "difference",
            "95% CI, unadjusted (higher − lower)",
            "p (Holm in group)",
        ]
        lines += [
            "<details><summary>The significant pairs</summary>",
            "",
            markdown_table(header, significant),
            "",
            "</details>",
            "",
        ]
    return lines


def _across_seeds(picked: blk.Picked[Row], view: str) -> list[str]:
    """Per block with two seeds or more: every pair's mean per-seed AUC difference, t-interval, Holm."""
    from statsmodels.stats.multitest import multipletests

    from privauditor.tasks.stats.significance import seed_level_interval

    body = []
    for block in sorted(picked):
        techniques = {n: by for n, by in picked[block].items() if n != blk.CONTROL}
        seeds = sorted(set.intersection(*(set(by) for by in techniques.values()))) if techniques else []
        if len(seeds) < 2:
            continue
        found = []
        for a, b in combinations(sorted(techniques), 2):
            differences = [
                blk.measured(techniques[a][s], "auc") - blk.measured(techniques[b][s], "auc") for s in seeds
            ]
            interval = seed_level_interval(differences)
            assert interval is not None, "two seeds or more"
            found.append((a, b, interval))
        _, adjusted, _, _ = multipletests([i["p_value"] for _, _, i in found], alpha=ALPHA, method="holm")
        for (a, b, i), p in zip(found, adjusted, strict=True):
            body.append(
                [
                    *block,
                    len(seeds),
                    f"{a} − {b}",
                    f"{i['mean']:+.3f}",
                    f"[{i['ci_low']:+.3f}, {i['ci_high']:+.3f}]",
                    f"{i['p_value']:.2g}",
                    f"{p:.2g}",
                ]
            )
    lines = ["## Across seeds (exploratory)", ""]
    if not body:
        return lines + [
            "No block has two seeds or more: no seed-level interval (run more seeds to get one).",
            "",
        ]
    header = [
        "model",
        "dataset",
        "seeds",
        "difference",
        "mean",
        "95% t-interval (unadjusted)",
        "p",
        "p (Holm over the block's pairs)",
    ]
    return lines + [
        f"At the {view} checkpoint, per block: the t-interval of the mean of the per-seed AUC differences "
        "(seeds as replicates of the block's training; every pair, Holm over the block's pairs).",
        "",
        markdown_table(header, body),
        "",
    ]


def _controls(out: Path, rows: list[Row], attack: str) -> list[str]:
    from privauditor.tasks.stats.significance import holm_adjusted

    blind: dict[tuple, dict[str, Any]] = {}
    base: dict[tuple, float | None] = {}
    for row in rows:
        key = (row["dataset"], row["seed"])
        if row["attack"] == "blind" and key not in blind:
            blind[key] = {"auc": row["auc"]} | _shift(out, row["cell_id"])
        if row["adaptation"] == blk.CONTROL and row["attack"] == attack:
            base[(row["model"], *key)] = row["auc"]
    lines = ["## Controls", ""]
    if blind:
        adjusted = holm_adjusted([b.get("p_value", 1.0) for b in blind.values()])
        body = []
        for (key, b), p in zip(blind.items(), adjusted, strict=True):
            status = "SHIFTED: attacks may measure the shift" if p <= ALPHA else "no shift detected"
            body.append([*key, _fmt(b["auc"]), _fmt(b.get("null_auc_mean")), f"{p:.3g}", status])
        lines += [
            "Model-free `blind` classifier per split (out-of-fold AUC; its permutation null's mean sits "
            "below 0.5, so the split is judged by the permutation p-value, Holm over splits):",
            "",
            markdown_table(["dataset", "seed", "blind AUC", "null mean", "p (Holm)", "status"], body),
            "",
        ]
    else:
        lines += ["No `blind` attack ran: no split was tested for a shift.", ""]
    if base:
        body = [[*k, _fmt(v)] for k, v in sorted(base.items())]
        lines += [
            f"The un-adapted base (`none`) under `{attack}`:",
            "",
            markdown_table(["model", "dataset", "seed", "AUC"], body),
            "",
        ]
    else:
        lines += ["No `none` cell ran: there is no un-adapted control.", ""]
    return lines


def _shift(out: Path, cell_id: str) -> dict[str, Any]:
    """The blind view's stored permutation test of a cell's split."""
    import pyarrow.parquet as pq

    from privauditor.tasks.views.blind import METADATA

    for checkpoint in Results(out).cell(cell_id).record()["checkpoints"]:
        relative = checkpoint["views"].get("blind", {}).get("blind")
        if relative and (out / relative).exists():
            return json.loads(pq.read_schema(out / relative).metadata[METADATA])
    return {}
