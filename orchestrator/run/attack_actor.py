"""A trial's attacks as parallel tasks of one attack actor on the trial's node (the cell's ``map_jobs``).

Attacks are milliseconds to a second each, so fresh task workers (started and reaped per cell) would cost
more than the attacks: one actor per trial process, kept while Tune reuses the process, runs a cell's
attack jobs on its threads side by side.
"""

from __future__ import annotations

import functools
from typing import Any


def ray_tasks(run: Any, jobs: list[Any]) -> list[Any]:
    """Run ``run(job)`` for every job in parallel on this trial's attack actor (Ray actor tasks)."""
    import ray

    actor = attack_actor()
    return ray.get([actor.run.remote(run, job) for job in jobs])


@functools.cache
def attack_actor() -> Any:
    """The attack actor of this trial process, started on first use. It asks for no CPU, so it never
    waits behind trials holding every CPU, and it is pinned to this trial's node: the jobs read the cell's
    files there (Ray places an actor that asks for no resources on any node)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_concurrency=8)
    class AttackActor:
        def __init__(self) -> None:
            import privauditor.tasks.cell.attack_job  # noqa: F401  # the jobs' module: numpy and pyarrow, no torch

        def run(self, run: Any, job: Any) -> Any:
            return run(job)

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return AttackActor.options(scheduling_strategy=here).remote()
