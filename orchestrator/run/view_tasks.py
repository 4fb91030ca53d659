"""A cell's views that adapt a model of their own (SPV-MIA's self-prompt reference) as Ray tasks.

Such a view costs one more adaptation, so in a sweep it is not computed in the trial's process: the trial
reserves a second bundle for it (:func:`bundles`: as many CPUs as its own, half of its GPUs, the other
half left to the trial, so the cell asks the cluster for no more GPUs than it says), both on one node
(``STRICT_PACK``: the task writes into the cell's folder). When the cell audits its last checkpoint, the
task starts (:func:`view_task`), rebuilds the target from the saved adaptation
(:func:`privauditor.tasks.cell.view_job.compute_view`) and runs beside the cell's other views. Tune reserves a
trial's bundles for all of its life, so the second one waits idle while the cell trains: only cells whose
attacks need it reserve one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def adapts(cell: Any) -> bool:
    """The cell (a resolved spec) runs an attack with a view that adapts a model of its own (its plan
    says)."""
    from privauditor.tasks.cell.plan import plan_cell

    return plan_cell(cell).adapts


def bundles(cell: Any, resources: dict[str, float]) -> tuple[list[dict[str, float]], str]:
    """The trial's placement-group bundles and strategy: its own resources, and a second bundle for the
    view task where the cell needs one."""
    if not adapts(cell):
        return [resources], "PACK"
    first = shared(resources)
    # a custom resource names the node type the cell runs on (``run.resources``): the trial's bundle holds
    # it, the view task's (on the same node) asks only for CPUs and GPUs
    return [first, {k: v for k, v in first.items() if k in ("CPU", "GPU")}], "STRICT_PACK"


def view_task(resources: dict[str, float]) -> Callable[[Callable[..., Any], Any], Callable[[], Any]]:
    """The cell's ``run_view`` in a trial placed with :func:`bundles`: ``run(work, job)`` starts
    ``work(job)`` as a task in the trial's second bundle and returns the wait for its result."""
    import ray
    from ray.util import get_current_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundle = shared(resources)
    threads = max(1, int(bundle["CPU"]))

    def run(work: Callable[..., Any], job: Any) -> Callable[[], Any]:
        strategy = PlacementGroupSchedulingStrategy(
            get_current_placement_group(), placement_group_bundle_index=1
        )
        task = ray.remote(_in_task).options(
            num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0.0), scheduling_strategy=strategy,
            max_retries=0, name=f"view {job.view.name}",
        )  # fmt: skip
        found = task.remote(work, job, threads)
        return lambda: ray.get(found)

    return run


def shared(resources: dict[str, float]) -> dict[str, float]:
    """Each bundle of a trial with ``resources`` and a view task: its CPUs, half its GPUs."""
    half = {"GPU": resources["GPU"] / 2} if resources.get("GPU") else {}
    return resources | half


def _in_task(work: Callable[..., Any], job: Any, threads: int) -> Any:
    import torch

    torch.set_num_threads(threads)  # its bundle's CPUs, as a trial's own process has
    return work(job)
