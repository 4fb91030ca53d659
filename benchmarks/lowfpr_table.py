"""The low-FPR table of a finished ``lowfpr`` sweep (or any results folder with >= 1,000 non-members).

    python benchmarks/lowfpr_table.py RESULTS [RESULTS ...]   # e.g. results/lowfpr results/lowfpr_opt

For each trained cell at its last checkpoint, every attack's AUC and TPR at 1 % FPR with its 95 %
Clopper-Pearson interval (privauditor's rule: the highest TPR at an FPR strictly below 1 %, no
interpolation), and the same TPR interpolated on the ROC curve (``np.interp`` at 0.01, EZ-MIA's
``mia/metrics.py`` convention), so that both compare with the papers. Then the anchors' claims, per
cell: EZ-MIA's TPR over the best TPR of the attacks published before 2025 (its paper: x3.8, 66.3 %
against 17.5 %, GPT-2 on WikiText) and WBC's over ``reference``'s and over the same best (its paper:
2-3x at low FPR). Last, one table of every trained cell: each attack's AUC and strict TPR. Prints
markdown, then one JSON object of the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from privauditor.tasks.infra.results import Results

#: attacks of 2025 or later (the anchors' own and the other recent ones); every other is "before 2025"
RECENT = {"ezmia", "ezmia_degenerate_one", "wbc", "informia", "gap_k", "camia", "lt_iqr"}
CONTROLS = {"blind"}


def interpolated(roc: list[list[float]], fpr: float = 0.01) -> float:
    points = np.array(roc)
    return float(np.interp(fpr, points[:, 0], points[:, 1]))


def last_metrics(cell: Path) -> tuple[dict, dict, dict]:
    record = json.loads((cell / "cell.json").read_text())
    last = max(record["checkpoints"], key=lambda c: c["step"])
    return record, last, json.loads((cell / last["path"] / "metrics.json").read_text())


def rescored(results: Path, checkpoint: dict, attack: str, params: dict, source: str | None = None) -> dict:
    """``attack`` at ``params`` on the views the run stored at ``checkpoint`` for ``source`` (default: the
    attack itself): its metrics (e.g. both EZ-MIA rules from the views of whichever one the run had)."""
    from privauditor.tasks.attacks import build_attack
    from privauditor.tasks.infra.files import read_table
    from privauditor.tasks.stats.metrics import attack_metrics

    built = build_attack(attack, params)
    views = {role: view.read(read_table(results / checkpoint["views"][source or attack][role]))
             for role, view in built.views().items()}  # fmt: skip
    return attack_metrics(views["signals"].member, built.score(views))


def extraction_of(results: Path, cell: Path, record: dict, last: dict) -> dict:
    """The last checkpoint's extraction and PII rates: its ``extraction.json``, or for results written
    before there was one, computed the same way from its stored signals and the split's records."""
    if last.get("extraction"):
        return last["extraction"]
    import pyarrow.parquet as pq

    from privauditor.tasks.datasets import load_dataset, pii_patterns
    from privauditor.tasks.leakage.extraction import leakage
    from privauditor.tasks.models import load_model
    from privauditor.tasks.passes.signal_table import Signals

    config = record["config"]
    signals = Signals.from_table(pq.read_table(cell / last["path"] / "signals.parquet"))
    texts = {e.sample_id: e.target for e in load_dataset(config["dataset"]).examples}
    tokenizer = load_model(config["model"], device="cpu").tokenizer
    return leakage(signals, [texts[i] for i in signals.sample_id], tokenizer, pii_patterns(config["dataset"]))


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


ZERO = "ezmia"  # the authors' 0 for degenerate texts; ezmia_degenerate_one scores them 1
ONE = "ezmia_degenerate_one"


def claim(cell: str, scored: dict) -> dict:
    """Per convention (strict, interpolated), every attack's TPR at 1 % FPR, the best attack before 2025
    and the best of 2025-26."""
    out: dict = {"cell": cell}
    for rule in ("strict", "interpolated"):
        tpr = {
            a: m["tpr_at_1pct_fpr"] if rule == "strict" else interpolated(m["roc"]) for a, m in scored.items()
        }
        older = [a for a in tpr if a not in RECENT | CONTROLS]
        out[rule] = tpr | {
            "best": max(older, key=tpr.get),
            "recent": max((a for a in tpr if a in RECENT), key=tpr.get),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args(argv)
    cells = [(r, c.path) for r in args.results for c in Results(r).folders()]
    claims, trained, leaks = [], {}, {}
    for results, cell in cells:
        record, last, metrics = last_metrics(cell)
        config = record["config"]
        ran = next((a for a in (ZERO, ONE) if "auc" in metrics.get(a, {})), None)
        if ran:  # both rules from the same views; ezmia before version 2 was the other rule
            metrics |= {name: rescored(results, last, name, {}, source=ran) for name in (ZERO, ONE)}
        scored = {a: m for a, m in metrics.items() if "auc" in m}
        n = next(iter(scored.values()))["n_nonmembers"]
        print(f"\n### {config['model']} / {config['adaptation']} / {config['dataset']} ({n} non-members)\n")
        print("| attack | AUC | TPR@1% [95 % CI] | TPR@1% interpolated |")
        print("| --- | --- | --- | --- |")
        for name, m in sorted(scored.items(), key=lambda kv: -(kv[1]["tpr_at_1pct_fpr"] or 0)):
            ci = m["tpr_at_1pct_fpr_ci"]
            print(
                f"| {name} | {m['auc']:.3f} | {m['tpr_at_1pct_fpr']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] "
                f"| {interpolated(m['roc']):.3f} |"
            )
        skipped = {a: m["skipped"] for a, m in metrics.items() if "skipped" in m}
        if skipped:
            print("\nskipped: " + "; ".join(f"{a} ({why})" for a, why in sorted(skipped.items())))
        leaks[f"{config['model']}/{config['adaptation']}"] = extraction_of(results, cell, record, last)
        if config["adaptation"] == "none":
            continue
        claims.append(claim(f"{config['model']}/{config['adaptation']}", scored))
        trained[claims[-1]["cell"]] = scored
    print(
        "\n| cell | convention | best before 2025 | ezmia (x over it; paper x3.8) | ezmia_degenerate_one (x) | "
        "wbc (x; paper 2-3x) | wbc / reference | best of 2025-26 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in claims:
        for rule in ("strict", "interpolated"):
            t, best = c[rule], c[rule][c[rule]["best"]]

            def cell(name, t=t, best=best):
                return "-" if t.get(name) is None else f"{t[name]:.3f} (x{fmt(ratio(t[name], best))})"

            print(
                f"| {c['cell']} | {rule} | {c[rule]['best']} {best:.3f} | {cell(ZERO)} | "
                f"{cell(ONE)} | {cell('wbc')} | {fmt(ratio(t.get('wbc'), t.get('reference')))} | "
                f"{t['recent']} {t[t['recent']]:.3f} |"
            )
    names = sorted({a for scored in trained.values() for a in scored})
    print("\n| attack | " + " | ".join(f"{c} AUC / TPR@1%" for c in trained) + " |")
    print("| --- |" + " --- |" * len(trained))
    for name in names:
        values = [trained[c].get(name) for c in trained]
        print(f"| {name} | " + " | ".join(
            "-" if m is None else f"{m['auc']:.3f} / {m['tpr_at_1pct_fpr']:.3f}" for m in values
        ) + " |")  # fmt: skip
    print("\n| cell | greedy members / non-members | (n, p) members / non-members | PII fields | "
          "PII members / non-members | PII difference [95 % CI] |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for name, found in leaks.items():
        if "all" not in found.get("pii", {}):
            print(f"| {name} | {fmt(found['greedy_members'])} / {fmt(found['greedy_nonmembers'])} | "
                  f"{fmt(found['sampled_members'])} / {fmt(found['sampled_nonmembers'])} | - | - | - |")  # fmt: skip
            continue
        pii = found["pii"]["all"]
        low, high = pii["reconstructed_difference_ci"]
        print(f"| {name} | {fmt(found['greedy_members'])} / {fmt(found['greedy_nonmembers'])} | "
              f"{fmt(found['sampled_members'])} / {fmt(found['sampled_nonmembers'])} | {pii['n']} | "
              f"{pii['reconstructed_members']:.3f} / {pii['reconstructed_nonmembers']:.3f} | "
              f"{pii['reconstructed_difference']:+.3f} [{low:+.3f}, {high:+.3f}] |")  # fmt: skip
    print(json.dumps({"cells": len(cells), "claims": claims}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
