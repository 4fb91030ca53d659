"""What a cell runs with: what the orchestrator lends it (:class:`CellEnvironment`) and the clock that
times its steps (:class:`Clock`, ``cell.json``'s ``timings``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .attack_job import MapJobs, in_process


class Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, step: str, work: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return work()
        finally:
            self.seconds[step] = round(self.seconds.get(step, 0.0) + time.perf_counter() - started, 3)


@dataclass(frozen=True)
class CellEnvironment:
    """What the orchestrator lends a cell (the defaults: one process, no limit)."""

    #: ``distributed(spec, workers)`` runs :func:`privauditor.tasks.training.distributed.train_worker` on
    #: ``workers`` ranks (Ray Train, from the orchestrator); cells whose ``train.deepspeed`` is set need it
    distributed: Callable[[dict[str, Any], int], Any] | None = None
    #: ``map_jobs(attack_job, jobs)``: how the attacks run on the stored signals (Ray tasks in a sweep)
    map_jobs: MapJobs = in_process
    #: ``run_view(compute_view, job)`` starts a view that adapts a model of its own (SPV-MIA's reference)
    #: out of the cell's process and returns the wait for it (a Ray task in a sweep; None: in the cell)
    run_view: Callable[[Callable[..., Any], Any], Callable[[], Any]] | None = None
    #: past this many seconds the cell stops with :class:`~privauditor.tasks.infra.deadline.CellTimeout`
    timeout_s: float | None = None
    #: recorded in ``cell.json`` (e.g. the Ray node that ran the cell)
    runtime: dict[str, Any] = field(default_factory=dict)


#: the defaults: the cell in this one process, no time limit
IN_PROCESS = CellEnvironment()
