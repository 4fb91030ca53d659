"""One attack on a cell's stored signals: scores and metrics, as a pure function of files.

The cell runs its attacks through ``map_jobs(attack_job, jobs)``: in-process by default, as parallel Ray
tasks under ``privauditor run`` (the orchestrator's map). This module imports no torch, so a task
worker starts in about a second.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .attacks import build_attack
from .metrics import attack_metrics
from .signals import Signals, read_table


def attack_job(
    name: str,
    params: dict[str, Any],
    signals_file: str,
    reference_file: str | None,
    bootstrap: int,
    seed: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Scores (higher = member, in the signals' sample order) and metrics of one attack."""
    signals = Signals.from_table(read_table(signals_file))
    reference = None
    if reference_file is not None:
        reference = Signals.from_table(read_table(reference_file)).aligned_to(signals.sample_id)
    scores = np.asarray(build_attack(name, params).score(signals, reference), dtype=np.float64)
    return scores, attack_metrics(signals.member, scores, bootstrap, seed)


def in_process(job: Any, jobs: list[tuple[Any, ...]]) -> list[Any]:
    """The default ``map_jobs``: one job after another in this process."""
    return [job(*args) for args in jobs]
