"""One attack on a cell's stored views: scores and metrics, as a pure function of files.

The cell runs its attacks through ``map_jobs(attack_job, jobs)``: in-process by default, as parallel Ray
tasks under ``privauditor run`` (the orchestrator's map). This module imports no torch, so a task
worker starts in about a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..attacks import build_attack
from ..infra.files import read_table
from ..stats.lower_bound import epsilon_bound
from ..stats.metrics import attack_metrics, duplication_metrics
from ..views._base import aligned


@dataclass(frozen=True)
class AttackJob:
    """One attack (``name`` with its ``params``) whose views, by role, are stored in ``view_files``;
    scored in ``signals_file``'s sample order. ``bootstrap`` resamples (seeded by ``seed``) give the
    intervals; with ``delta``, the empirical lower bound on ε at that δ
    (:mod:`privauditor.tasks.stats.lower_bound`); with ``repeated`` (sample id → times trained, for the members
    trained more than once), the duplication metrics."""

    name: str
    params: dict[str, Any]
    signals_file: str
    view_files: dict[str, str]
    bootstrap: int
    seed: int
    delta: float | None = None
    repeated: dict[str, int] = field(default_factory=dict)


#: ``map_jobs(attack_job, jobs)``: runs ``attack_job`` on every job, returns the results in order
MapJobs = Callable[[Callable[[AttackJob], Any], list[AttackJob]], list[Any]]


def attack_job(job: AttackJob) -> tuple[np.ndarray, dict[str, Any]]:
    """Scores (higher = member) and metrics of ``job``'s attack. An attack that may abstain
    (``Attack.abstains``) scores NaN where it does: such texts rank below every text it scores (it calls
    none of them a member), and the metrics count them (``abstained``, ``abstained_members``); where it
    abstains on every text the metrics hold only ``skipped`` (no row on the leaderboard, no scores)."""
    import pyarrow.parquet as pq

    name, params, signals_file, view_files = job.name, job.params, job.signals_file, job.view_files
    bootstrap, seed, delta, repeated = job.bootstrap, job.seed, job.delta, job.repeated

    labels = pq.ParquetFile(signals_file).read(columns=["sample_id", "member"])
    sample_ids = labels.column("sample_id").to_pylist()
    member = np.asarray(labels.column("member").to_pylist(), dtype=bool)
    attack = build_attack(name, params)
    inputs = {}
    for role, view in attack.views().items():
        table = read_table(view_files[role])
        inputs[role] = view.read(aligned(table, sample_ids) if view.parts() == ("scored",) else table)
    scores = np.asarray(attack.score(inputs), dtype=np.float64)
    abstained = np.isnan(scores)
    if attack.abstains and abstained.all():
        return scores, {"skipped": f"abstains on every text: {attack.abstains}", "abstained": len(scores)}
    if attack.abstains:  # a text it abstains on is ranked below every text it scores: not a member
        scores = np.where(abstained, np.nanmin(scores) - 1.0, scores)
    metrics = attack_metrics(member, scores, bootstrap, seed) | attack.fitted()
    if attack.abstains:
        metrics |= {"abstained": int(abstained.sum()), "abstained_members": int((abstained & member).sum())}
    times = np.array(
        [(repeated or {}).get(i, 1) if m else 0 for i, m in zip(sample_ids, member, strict=True)]
    )
    if delta is not None:  # per-record DP speaks of records trained once: repeated members are left out
        once = times <= 1
        metrics |= epsilon_bound(member[once], scores[once], delta)
    if repeated:
        metrics |= duplication_metrics(member, scores, times)
    return scores, metrics


def in_process(run: Callable[[AttackJob], Any], jobs: list[AttackJob]) -> list[Any]:
    """The default ``map_jobs``: one job after another in this process."""
    return [run(job) for job in jobs]
