"""Per-cell times of a finished sweep and the GPU check's conditions (used by ``gpu_check.sh``).

Prints one row per cell (device, precision, train / signals / gradients seconds, best AUC) and exits 1 if a cell
is not DONE, ran on another device than ``--device``, or has a non-finite metric.

    python benchmarks/gpu_report.py RESULTS_DIR [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from privauditor.orchestrator.tables import render
from privauditor.tasks.infra.results import Results
from privauditor.tasks.spec.resolved import CellSpec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--device", default="cuda", help="the device every cell must have used")
    args = parser.parse_args()
    problems, rows = [], []
    cells = [c.path for c in Results(args.results).folders(finished=False)]
    if not cells:
        problems.append(f"no cells under {args.results}")
    for cell in cells:
        if not (cell / "DONE").exists():
            problems.append(f"{cell.name}: not DONE")
            continue
        record = json.loads((cell / "cell.json").read_text())
        metrics = json.loads((cell / "metrics.json").read_text())
        aucs = [m["auc"] for m in metrics.values() if "auc" in m]
        if not aucs or not all(math.isfinite(a) for a in aucs):
            problems.append(f"{cell.name}: non-finite or missing AUC")
        if not record.get("device", "").startswith(args.device):
            problems.append(f"{cell.name}: ran on {record.get('device')}, not {args.device}")
        times = record["timings"]  # by step; each view is timed under its label
        spec = CellSpec.from_dict(record["config"])
        ds = spec.train.deepspeed
        rows.append([
            spec.adaptation, record.get("device"), record.get("precision", "fp32"), f"ZeRO-{ds.stage}" if ds else "-",
            times.get("train", 0.0), times.get("signals", 0.0) + times.get("signals (shared)", 0.0), times.get("grad_norm", 0.0),
            round(sum(times.values()), 1), round(max(aucs), 3) if aucs else "-",
        ])  # fmt: skip
    header = [
        "adaptation",
        "device",
        "precision",
        "deepspeed",
        "train s",
        "signals s",
        "gradients s",
        "total s",
        "best AUC",
    ]
    print(render(header, rows))
    for problem in problems:
        print(f"PROBLEM {problem}")
    print(json.dumps({"cells": len(cells), "problems": len(problems)}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
