"""The sweep's console: one line per finished or failed cell (done / running / failed, elapsed, ETA), one
per retry, and the leaderboard rebuilt as cells finish."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ray import tune

LEADERBOARD_EVERY_S = 30.0  # while a sweep runs; it is always rebuilt when the sweep ends


class Progress(tune.Callback):
    """Rebuilds the leaderboard as cells finish (at most every ``LEADERBOARD_EVERY_S``: a rebuild holds
    up Tune's loop, about a second at 200 cells) and prints done / running / failed with an ETA."""

    def __init__(self, total: int, rebuild: Callable[[], Any]) -> None:
        self.total, self.rebuild = total, rebuild
        self.done = self.failed = 0  # counted here: Tune sets a trial's final status after these callbacks
        self.started = self.rebuilt = time.perf_counter()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        if time.perf_counter() - self.rebuilt >= LEADERBOARD_EVERY_S or self.done == 1:
            self.rebuild()
            self.rebuilt = time.perf_counter()
        self._line(trials, trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        print(f"[privauditor] cell {trial.config['cell_id']} failed (attempt {trial.num_failures}), "
              f"retrying: {last_line(trial)}", flush=True)  # fmt: skip

    def on_trial_error(self, iteration, trials, trial, **info):
        self.failed += 1
        self._line(trials, trial)

    def _line(self, trials, finished):
        done, failed = self.done, self.failed
        running = sum(t.status == "RUNNING" and t is not finished for t in trials)
        elapsed = time.perf_counter() - self.started
        left = self.total - done - failed
        eta = f"{elapsed / (done + failed) * left / 60:.1f} min"
        print(f"[privauditor] cells {done + failed}/{self.total}: {done} done, {running} running, "
              f"{failed} failed; elapsed {elapsed / 60:.1f} min, ETA {eta}", flush=True)  # fmt: skip


def last_line(trial: Any) -> str:
    lines = str(trial.get_pickled_error() or "").strip().splitlines()
    return lines[-1] if lines else "unknown error"
