"""Sweep scaling: Ray's parallel speed-up, forward passes of shared vs per-cell work, scheduler overhead.

A sweep of 8 tiny cells (2 bases x 4 techniques x finance; every attack but GradNorm, whose backward
passes are per-cell work of another kind) runs four times, side by side in one run:

- ``seq``: one fresh process (its start-up and imports timed, as Ray's workers' are), 2 torch threads,
  the cells one after another through ``run_cell``, each with its ROC image as a sweep draws it (shared
  work done once, by the first cell that needs it, exactly as in a sweep);
- ``naive``: the same, each cell in its own results folder, so neighbour texts and reference signals
  are regenerated per cell (only its forward passes are used);
- ``ray``: ``privauditor run`` on a local Ray with 2 CPUs (1 CPU per trial, two trials at once; Ray
  started before the clock, as on a cluster);
- ``ray_serial``: the same cells one at a time with 2 CPUs each in a folder whose shared work is
  done, so each cell's wall time under Ray (the gap between consecutive ``DONE`` files) compares with
  the same cell's time in ``seq`` (cells whose shared work was already there).

- ``shared``: the same cells again in the benchmark's own process after ``naive`` (warm, as ``naive``
  is) into one results folder, shared work done once.

Figures: ``shared_work_speedup`` = the ``naive`` cells' summed time ÷ the ``shared`` cells' (shared work
done once per split against a tool that redoes it per cell, both warm; ``seq``'s cells pay its warm-up);
``parallel_speedup`` = seq ÷ ray wall time (``parallel_speedup_steady``: the same for the
rate at which cells finish once both are running, start-up left out); ``forward_passes`` (texts through a model in
inference, counted by hooks on every model call: :mod:`privauditor.tasks.passes.counting`) for the sweep,
``forward_passes_naive`` for ``naive``, and the bound, summed from the views' own costs
(:func:`forward_bound`; with the default attacks it is ``cells·n·(1+k) + cells·n_val + bases·datasets·n
+ splits·n·k``, n scored texts, k neighbours; the ``n_val`` term is the utility figure's validation
pass, which the issue's bound leaves out; other ``--attacks`` add their views' passes); ``scheduler_overhead_s`` = median over cells of (wall under
Ray − alone); ``parallel_speedup_ceiling`` = what a perfect 2x on the cells would give when each process
pays the sequential process's start-up (its wall time less cells x the median cell). The last line is
one JSON object.

    python benchmarks/sweep_scaling.py [--members 32] [--k 4] [--attacks loss,reference,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from privauditor.tasks.infra.results import Results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


#: the attacks the README's figures were measured with
MEASURED = ("loss", "reference", "zlib", "neighbourhood", "min_k", "min_k_pp")


def sweep_data(members: int, k: int, cpus_per_trial: int, attacks=MEASURED) -> dict:
    return {
        "name": "scaling",
        "matrix": {
            "model": ["tiny-gpt2", "tiny-llama"],
            "adaptation": ["none", "lora", "ia3", "prompt"],
            "dataset": ["finance"],
        },  # fmt: skip
        "attacks": list(attacks),
        "attack_params": {"neighbourhood": {"k": k}},
        "split": {"members": members, "nonmembers": members, "validation": members // 2}
        | ({} if attacks == MEASURED else {"population": members, "known_members": members // 2}),
        "train": {"epochs": 2, "max_length": 64},
        "score": {"bootstrap": 100},
        "run": {"cpus_per_trial": cpus_per_trial, "max_failures": 0},
        "tracking": {"wandb": {"mode": "disabled"}},
    }


def forward_bound(cells, n: int, n_val: int) -> int:
    """Texts through a model in inference the sweep needs at most, from the views' own costs (passes per
    scored text, :meth:`privauditor.tasks.views.View.cost`): a view of the adapted model once per cell,
    one of un-adapted models once per (base, split), work a view shares (``shared_forward``: neighbour
    generation) once per split, and each cell's validation pass."""
    per_cell = per_base = per_split = 0.0
    based, split = set(), set()
    for cell in cells:
        views = {(v.name, repr(v.key_parameters()), v.models()): v for a in cell.built_attacks().values()
                 for v in a.views().values()}  # fmt: skip
        for (name, params, models), view in views.items():
            cost = view.cost()
            if "target" in models:
                per_cell += n * cost.forward
            elif (cell.model, cell.dataset, cell.seed, name, params) not in based:
                based.add((cell.model, cell.dataset, cell.seed, name, params))
                per_base += n * cost.forward
            if cost.shared_forward and (cell.dataset, cell.seed, name, params) not in split:
                split.add((cell.dataset, cell.seed, name, params))
                per_split += n * cost.shared_forward
    return round(per_cell + per_base + per_split) + len(cells) * n_val


def inference_rows(count_file: Path, start: int) -> tuple[int, int]:
    """Texts through a model in inference mode counted after line ``start``, and the file's line count."""
    lines = count_file.read_text().splitlines() if count_file.exists() else []
    rows = sum(int(n) for _, mode, n in (line.split("\t") for line in lines[start:]) if mode == "infer")
    return rows, len(lines)


def in_process(cells, out_of) -> dict[str, float]:
    """Each cell through ``run_cell`` and its ROC image, the outputs a sweep writes per cell."""
    from privauditor.orchestrator.report.plots import roc_png
    from privauditor.tasks.cell.run import run_cell

    seconds = {}
    for cell in cells:
        started = time.perf_counter()
        outcome = run_cell(cell, out_of(cell))
        roc_png(outcome.metrics, out_of(cell) / "plots" / f"{outcome.cell_id}.png", outcome.cell_id)
        seconds[cell.cell_id()] = time.perf_counter() - started
    return seconds


def through_ray(data: dict, out: Path) -> float:
    from privauditor.orchestrator.run.runner import run_sweep
    from privauditor.orchestrator.sweepfile.sweep import parse_sweep

    started = time.perf_counter()
    code = run_sweep(parse_sweep(data), out)
    assert code == 0, "the Ray sweep failed"
    return time.perf_counter() - started


def sequential(args, out: Path) -> tuple[float, dict[str, float]]:
    """The cells one after another in a fresh process (its start-up and imports counted, as Ray's
    workers' are): its wall time and each cell's time inside it."""
    command = [
        sys.executable,
        __file__,
        "--members",
        str(args.members),
        "--k",
        str(args.k),
        "--attacks",
        ",".join(args.attacks),
        "--child-seq",
        str(out),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout.strip().splitlines()[-1])


def child_seq(args) -> None:
    import torch

    from privauditor.orchestrator.sweepfile.sweep import parse_sweep

    torch.set_num_threads(2)
    cells = parse_sweep(sweep_data(args.members, args.k, 1, args.attacks)).cells
    print(json.dumps(in_process(cells, lambda cell: Path(args.child_seq))))


def steady(out: Path) -> float:
    """Seconds between consecutive cells finishing, from the first to the last (start-up excluded)."""
    times = sorted((c.path / "DONE").stat().st_mtime for c in Results(out).folders())
    return (times[-1] - times[0]) / (len(times) - 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=32)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument(
        "--attacks", type=lambda text: tuple(text.split(",")), default=MEASURED,
        help="comma-separated attacks (default: the set the README's figures were measured with)",
    )  # fmt: skip
    parser.add_argument("--child-seq", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_seq:
        child_seq(args)
        return 0
    work = Path(tempfile.mkdtemp(prefix="sweep-scaling-"))
    count_file = work / "forward.tsv"
    os.environ["PRIVAUDITOR_COUNT_FORWARD"] = str(count_file)  # before Ray starts: its workers inherit it

    import ray
    import torch

    from privauditor.orchestrator.run.trials import forwarded_env
    from privauditor.orchestrator.sweepfile.sweep import parse_sweep
    from privauditor.orchestrator.tables import render
    from privauditor.tasks.models import load_model

    torch.set_num_threads(2)
    sweep = parse_sweep(sweep_data(args.members, args.k, 1, args.attacks))
    cells = list(sweep.cells)
    for model in {c.model for c in cells}:
        load_model(model)  # bases built (cache) before any clock starts

    seq_s, seq = sequential(args, work / "seq")
    forward_passes, mark = inference_rows(count_file, 0)
    naive = in_process(cells, lambda cell: work / "naive" / cell.cell_id())
    forward_passes_naive, mark = inference_rows(count_file, mark)
    shared = in_process(cells, lambda cell: work / "shared")  # the same warm process, one results folder
    _, mark = inference_rows(count_file, mark)

    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": forwarded_env()}
    )
    ray_started = time.time()
    ray_s = through_ray(sweep_data(args.members, args.k, 1, args.attacks), work / "ray")
    ray_first = min((c.path / "DONE").stat().st_mtime for c in Results(work / "ray").folders()) - ray_started
    ray_passes, mark = inference_rows(count_file, mark)
    (work / "ray_serial").mkdir()
    shutil.copytree(work / "seq" / "shared", work / "ray_serial" / "shared")
    through_ray(sweep_data(args.members, args.k, 2, args.attacks), work / "ray_serial")
    ray.shutdown()

    # the cells whose shared work (neighbours, reference signals) was already there in `seq`
    first = {next(c.cell_id() for c in cells if c.model == m) for m in {c.model for c in cells}}
    finished = sorted(
        ((c.path / "DONE").stat().st_mtime, c.cell_id) for c in Results(work / "ray_serial").folders()
    )
    rows, overheads = [], []
    for (before, _), (after, cell_id) in zip(finished, finished[1:], strict=False):
        if cell_id in first:
            continue
        overheads.append(after - before - seq[cell_id])
        rows.append([cell_id, f"{seq[cell_id]:.2f}", f"{after - before:.2f}", f"{overheads[-1]:+.2f}"])
    print(render(["cell", "alone in a warm process s", "under Ray s", "overhead s"], rows))

    n = args.members * 2
    splits = len({(c.dataset, c.seed) for c in cells})
    bases_datasets = len({(c.model, c.dataset) for c in cells})
    bound = forward_bound(cells, n, args.members // 2)
    if args.attacks == MEASURED:  # the issue's formula: what the views' own costs add up to here
        assert bound == (
            len(cells) * n * (1 + args.k)
            + len(cells) * (args.members // 2)
            + bases_datasets * n
            + splits * n * args.k
        ), bound
    steady_ratio = (sum(seq.values()) / len(cells)) / steady(work / "ray")
    # Amdahl: start-up (process, imports, first loads) is paid by every process, the cells are shared
    # out; even a perfect 2x on the cells cannot beat this ceiling
    cell_s = statistics.median(seq.values())
    seq_startup = seq_s - len(cells) * cell_s
    ceiling = seq_s / (seq_startup + len(cells) * cell_s / 2)
    print(f"start-up: {seq_startup:.1f} s in the sequential process (its wall time less {len(cells)} x the "
          f"median cell, {cell_s:.2f} s); under Ray the first cell was done {ray_first:.1f} s after the "
          f"start; ceiling with a perfect 2x on the cells: {ceiling:.2f}")  # fmt: skip
    print(render(
        ["run", "cells", "wall s", "texts through a model (inference)"],
        [["seq (1 fresh process, 2 threads)", len(cells), f"{seq_s:.1f}", forward_passes],
         ["naive (shared work per cell, warm process)", len(cells), f"{sum(naive.values()):.1f}",
          forward_passes_naive],
         ["shared (the same, shared work once, warm)", len(cells), f"{sum(shared.values()):.1f}", forward_passes],
         ["ray (2 CPUs, 2 trials at once)", len(cells), f"{ray_s:.1f}", ray_passes]],

    ))  # fmt: skip
    figures = {
        "parallel_speedup": round(seq_s / ray_s, 3),
        "parallel_speedup_steady": round(steady_ratio, 3),  # per-cell rate once both are running
        "parallel_speedup_ceiling": round(ceiling, 3),
        "seq_startup_s": round(seq_startup, 2),
        "ray_first_cell_done_s": round(ray_first, 2),
        "forward_passes": forward_passes,
        "forward_passes_ray": ray_passes,
        "forward_passes_naive": forward_passes_naive,
        "forward_passes_bound": bound,
        # shared work once per split against a per-cell tool that recomputes it in every cell: the same
        # cells and code, one after the other in the same warm process (seq's cells pay its warm-up)
        "shared_cells_s": round(sum(shared.values()), 2),
        "naive_cells_s": round(sum(naive.values()), 2),
        "shared_work_speedup": round(sum(naive.values()) / sum(shared.values()), 3),
        "scheduler_overhead_s": round(statistics.median(overheads), 3),
        "seq_s": round(seq_s, 2),
        "ray_s": round(ray_s, 2),
        "cells": len(cells),
    }
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
