"""Work one training cell loses per preemption, with a drain notice and without one.

Runs the cell three times in this process: uninterrupted (the reference, and the training time ``T``);
with a drain notice (:func:`privauditor.tasks.infra.drain.request`, as SIGTERM gives it) after
``--notice-at`` of ``T``, which saves the step state at the next step boundary and stops
(:class:`~privauditor.tasks.training.resume.Preempted`); and once more, resuming from that state. With the
notice the work lost is the time from the notice to the saved state (the rest of the step then running, plus
the save); without it (a kill, or a notice nothing hears) it is everything trained before the kill, which a
restart from scratch trains again. The save is set against GKE's 30 s notice window (AWS spot gives 120 s).
The last line says whether the resumed cell's files are the uninterrupted run's, byte for byte.

Run::

    OMP_NUM_THREADS=1 python benchmarks/preemption.py --model tiny-llama --adaptation lora --members 100
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.infra import drain
from privauditor.tasks.infra.results import CellFolder
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.training import loop as training_loop
from privauditor.tasks.training.resume import STATE_FILE, Preempted

GKE_NOTICE_S = 30.0


def outputs(cell_dir: Path) -> dict[str, bytes]:
    """Every checkpoint's scores and metrics and the final adapter, by path in the cell folder."""
    names = ("scores.parquet", "metrics.json", "adapter_model.safetensors", "model.safetensors")
    return {str(p.relative_to(cell_dir)): p.read_bytes() for p in cell_dir.rglob("*") if p.name in names}


def noticed_run(cell, out: Path, after_s: float) -> Preempted:
    """Run the cell with a drain notice ``after_s`` seconds into its training; the :class:`Preempted` it
    stops with."""
    original = training_loop.train

    def timed(*args, **kwargs):
        threading.Timer(after_s, drain.request).start()
        return original(*args, **kwargs)

    training_loop.train = timed
    try:
        run_cell(cell, out)
    except Preempted as stopped:
        return stopped
    finally:
        training_loop.train = original
    raise SystemExit("training ended before the notice: lower --notice-at")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--adaptation", default="lora")
    parser.add_argument("--dataset", default="finance")
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument(
        "--notice-at", type=float, default=0.6, help="the notice's time, a fraction of training"
    )
    args = parser.parse_args()
    settings = {"model": args.model, "adaptation": args.adaptation, "dataset": args.dataset}
    cell = cell_config(settings, [
        f"split.members={args.members}", f"split.nonmembers={args.members}", f"train.epochs={args.epochs}",
        f"train.checkpoints=[1,{args.epochs // 2},{args.epochs}]", "attacks=[loss,zlib]",
    ])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        whole = run_cell(cell, Path(tmp) / "whole")
        record = json.loads((whole.path / "cell.json").read_text())
        seconds, steps = record["train"]["seconds"], record["train"]["steps"]
        print(
            f"cell {cell.cell_id()}: {steps} steps, training {seconds:.1f} s ({1000 * seconds / steps:.0f} ms a step)"
        )
        after = args.notice_at * seconds
        stopped = noticed_run(cell, Path(tmp) / "cut", after)
        state = CellFolder(Path(tmp) / "cut", cell.cell_id()).resume_dir / STATE_FILE
        lost = stopped.notice_to_saved or 0.0
        print(f"notice after {after:.1f} s of training; state saved after step {stopped.step} "
              f"({state.stat().st_size / 1e6:.1f} MB)")  # fmt: skip
        print(f"lost with the notice: {lost:.2f} s (notice to state saved: the step under way plus the save)")
        print(f"lost without it: {after:.1f} s (all training before the kill; a restart trains it again)")
        print(f"save: {stopped.save_seconds:.2f} s, {100 * stopped.save_seconds / GKE_NOTICE_S:.2f} % of GKE's "
              f"{GKE_NOTICE_S:.0f} s notice (notice to saved: {100 * lost / GKE_NOTICE_S:.1f} %)")  # fmt: skip
        drain.reset()
        started = time.perf_counter()
        resumed = run_cell(cell, Path(tmp) / "cut")
        again = json.loads((resumed.path / "cell.json").read_text())
        same = outputs(resumed.path) == outputs(whole.path)
        print(f"resumed from step {again['resumed_from_step']}: cell done in {time.perf_counter() - started:.1f} s, "
              f"{len(outputs(whole.path))} files identical to the uninterrupted run's: {same}")  # fmt: skip


if __name__ == "__main__":
    main()
