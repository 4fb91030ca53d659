"""One attack on a cell's stored views: scores and metrics, as a pure function of files.

The cell runs its attacks through ``map_jobs(attack_job, jobs)``: in-process by default, as parallel Ray
tasks under ``privauditor run`` (the orchestrator's map). This module imports no torch, so a task
worker starts in about a second.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .attacks import build_attack
from .metrics import attack_metrics
from .signals import read_table
from .views._base import aligned


def attack_job(
    name: str,
    params: dict[str, Any],
    signals_file: str,
    view_files: dict[str, str],
    bootstrap: int,
    seed: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Scores (higher = member, in ``signals_file``'s sample order) and metrics of one attack whose views,
    by role, are stored in ``view_files``."""
    import pyarrow.parquet as pq

    labels = pq.ParquetFile(signals_file).read(columns=["sample_id", "member"])
    sample_ids = labels.column("sample_id").to_pylist()
    member = np.asarray(labels.column("member").to_pylist(), dtype=bool)
    attack = build_attack(name, params)
    inputs = {}
    for role, view in attack.views().items():
        table = read_table(view_files[role])
        inputs[role] = view.read(aligned(table, sample_ids) if view.parts() == ("scored",) else table)
    scores = np.asarray(attack.score(inputs), dtype=np.float64)
    return scores, attack_metrics(member, scores, bootstrap, seed) | attack.fitted()


def in_process(job: Any, jobs: list[tuple[Any, ...]]) -> list[Any]:
    """The default ``map_jobs``: one job after another in this process."""
    return [job(*args) for args in jobs]
