"""The low-FPR table of a finished ``lowfpr`` sweep (or any results folder with >= 1,000 non-members).

    python benchmarks/lowfpr_table.py RESULTS

For each trained cell at its last checkpoint, every attack's AUC and TPR at 1 % FPR with its 95 %
Clopper-Pearson interval (privauditor's rule: the highest TPR at an FPR strictly below 1 %, no
interpolation), and the same TPR interpolated on the ROC curve (``np.interp`` at 0.01, EZ-MIA's
``mia/metrics.py`` convention), so that both compare with the papers. Then the anchors' claims, per
cell: EZ-MIA's TPR over the best TPR of the attacks published before 2025 (its paper: x3.8, 66.3 %
against 17.5 %, GPT-2 on WikiText) and WBC's over ``reference``'s and over the same best (its paper:
2-3x at low FPR). Prints markdown, then one JSON object of the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

#: attacks of 2025 or later (the anchors' own and the other recent ones); every other is "before 2025"
RECENT = {"ezmia", "wbc", "informia", "gap_k", "camia", "lt_iqr"}
CONTROLS = {"blind"}


def interpolated(roc: list[list[float]], fpr: float = 0.01) -> float:
    points = np.array(roc)
    return float(np.interp(fpr, points[:, 0], points[:, 1]))


def last_metrics(cell: Path) -> tuple[dict, dict]:
    record = json.loads((cell / "cell.json").read_text())
    last = max(record["checkpoints"], key=lambda c: c["step"])
    return record, json.loads((cell / last["path"] / "metrics.json").read_text())


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    cells = sorted(p for p in (args.results / "cells").iterdir() if (p / "DONE").exists())
    claims = []
    for cell in cells:
        record, metrics = last_metrics(cell)
        config = record["config"]
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
        if config["adaptation"] == "none":
            continue
        older = {a: m["tpr_at_1pct_fpr"] for a, m in scored.items() if a not in RECENT | CONTROLS}
        best = max(older, key=older.get)
        tpr = {a: m["tpr_at_1pct_fpr"] for a, m in scored.items()}
        claims.append({
            "cell": f"{config['model']}/{config['adaptation']}", "best_before_2025": best, "its_tpr": older[best],
            "ezmia": tpr.get("ezmia"), "ezmia_over_best": ratio(tpr.get("ezmia"), older[best]),
            "wbc": tpr.get("wbc"), "wbc_over_reference": ratio(tpr.get("wbc"), tpr.get("reference")),
            "wbc_over_best": ratio(tpr.get("wbc"), older[best]),
            "best_recent": max((a for a in scored if a in RECENT), key=lambda a: tpr[a]),
        })  # fmt: skip
    print("\n| cell | best before 2025 (TPR@1%) | ezmia | ezmia / best (paper x3.8) | wbc | wbc / reference | "
          "wbc / best (paper 2-3x) | best of 2025-26 |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"

    for c in claims:
        print(f"| {c['cell']} | {c['best_before_2025']} ({c['its_tpr']:.3f}) | {fmt(c['ezmia'])} | "
              f"{fmt(c['ezmia_over_best'])} | {fmt(c['wbc'])} | {fmt(c['wbc_over_reference'])} | "
              f"{fmt(c['wbc_over_best'])} | {c['best_recent']} |")  # fmt: skip
    print(json.dumps({"cells": len(cells), "claims": claims}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
