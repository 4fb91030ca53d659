"""The sweep's console: a progress line (done / running / failed, elapsed, ETA) at most every
``PROGRESS_EVERY_S`` and when the last cell ends, a line for every failed cell and every retry, and the
leaderboard rebuilt as cells finish.

The ETA weighs each cell by what ``privauditor plan`` predicts it costs on this machine (:func:`weights`):
the time so far per unit of predicted work done, times the predicted work left. Cells differ several-fold
(a `none` cell scores the base once for its split; `full` trains every weight), so a count of cells alone
extrapolates the first cells' pace to all of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ray import tune

LEADERBOARD_EVERY_S = 30.0  # while a sweep runs; it is always rebuilt when the sweep ends
PROGRESS_EVERY_S = 30.0  # a 200-cell sweep on 2 cores prints about 80 lines, not one per cell


class Progress(tune.Callback):
    """Rebuilds the leaderboard as cells finish (at most every ``LEADERBOARD_EVERY_S``: a rebuild holds
    up Tune's loop, about a second at 200 cells) and prints done / running / failed with an ETA."""

    def __init__(
        self, total: int, rebuild: Callable[[], Any], weigh: Callable[[], Any] | None = None
    ) -> None:
        self.total, self.rebuild = total, rebuild
        self.done = self.failed = 0  # counted here: Tune sets a trial's final status after these callbacks
        self.weights: dict[str, float] = {}  # cell id -> predicted cost; until known, every cell alike
        if weigh is not None:  # priced beside the sweep, not before it: planning many cells takes a while
            threading.Thread(target=lambda: self.weights.update(weigh() or {}), daemon=True).start()
        self.finished: set[str] = set()
        self.started = self.rebuilt = time.perf_counter()
        self.printed = float("-inf")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        self.finished.add(trial.config["cell_id"])
        if time.perf_counter() - self.rebuilt >= LEADERBOARD_EVERY_S or self.done == 1:
            self.rebuild()
            self.rebuilt = time.perf_counter()
        self._line(trials, trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        print(f"[privauditor] cell {trial.config['cell_id']} failed (attempt {trial.num_failures}), "
              f"retrying: {last_line(trial)}", flush=True)  # fmt: skip

    def on_trial_error(self, iteration, trials, trial, **info):
        self.failed += 1
        self.finished.add(trial.config["cell_id"])
        print(f"[privauditor] cell {trial.config['cell_id']} failed: {last_line(trial)}", flush=True)
        self._line(trials, trial, always=True)

    def _line(self, trials, finished, always=False):
        done, failed = self.done, self.failed
        now = time.perf_counter()
        if not always and done + failed < self.total and now - self.printed < PROGRESS_EVERY_S:
            return
        self.printed = now
        running = sum(t.status == "RUNNING" and t is not finished for t in trials)
        elapsed = time.perf_counter() - self.started
        eta = f"{eta_seconds(elapsed, self.finished, self.total, dict(self.weights)) / 60:.1f} min"
        print(f"[privauditor] cells {done + failed}/{self.total}: {done} done, {running} running, "
              f"{failed} failed; elapsed {elapsed / 60:.1f} min, ETA {eta}", flush=True)  # fmt: skip


def eta_seconds(elapsed: float, finished: set[str], total: int, weights: dict[str, float]) -> float:
    """Seconds left: ``elapsed`` per unit of the finished cells' predicted cost, times the cost left (per
    cell alike where ``weights`` does not cover every cell)."""
    done = len(finished)
    if not done:
        return float("nan")
    if len(weights) != total or not all(w > 0 for w in weights.values()):
        return elapsed / done * (total - done)
    spent = sum(weights[c] for c in finished)
    return max(0.0, elapsed / spent * (sum(weights.values()) - spent))  # never "-0.0" from rounding


def weights(sweep: Any, specs: dict[str, Any]) -> dict[str, float] | None:
    """Each pending cell's predicted seconds on this machine (``privauditor plan``'s model, the price
    table's CPU rates, token counts bounded by max_length), None when the planner cannot price them."""
    import dataclasses

    from ..plan.inputs import load_prices, read_cluster
    from ..plan.plan import plan_cells, tokens_for

    try:
        pending = dataclasses.replace(sweep, cells=tuple(c for c in sweep.cells if _id(c) in specs))
        planned = plan_cells(pending, read_cluster(None, load_prices(), None), tokens_for(measure=False))
    except Exception:  # an estimate only: a cell the planner cannot price leaves the plain count
        return None
    return {p.spec.cell_id(): p.seconds for p in planned}


def _id(cell: Any) -> str:
    return cell.resolve(build=False).cell_id()


def reason(error: BaseException) -> str:
    """The cell's own exception in one line (not Ray's wrapper around it)."""
    from privauditor.tasks.infra.errors import one_line

    cause = getattr(error, "cause", None) or error
    return one_line(cause, limit=300)


def last_line(trial: Any) -> str:
    """Why the trial's latest attempt failed: the last line of the traceback Tune has just written to the
    trial's ``error.txt``, the exception's class without its module path."""
    from pathlib import Path

    path = trial.error_file
    text = Path(path).read_text() if path and Path(path).is_file() else ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown error"
    kind, sep, message = lines[-1].strip().partition(": ")  # Ray indents some of its causes
    return (kind.rsplit(".", 1)[-1] + sep + message)[:300]
