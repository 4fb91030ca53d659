"""A cell's adaptation step in a Ray Train ``TorchTrainer`` (DeepSpeed ZeRO on every worker).

Ray's Train-in-Tune pattern (Ray Train V2, the default from Ray 2.5x): the cell's Tune trial is the
driver, it starts a ``TorchTrainer`` whose workers get their own resources (a placement group beside
the trial's), runs :func:`privauditor.tasks.training.distributed.train_worker` on each, and takes rank 0's return
value (only rank 0 reports, so there is one record and one W&B run per cell). The same launcher serves
``privauditor cell`` on a local Ray. Worker-node loss is retried by Ray Train's ``FailureConfig``
below the trial; a lost trial node is retried by Tune's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError


def _worker(spec: dict[str, Any]) -> dict[str, Any] | None:
    import torch

    from privauditor.tasks.training.distributed import train_worker

    torch.set_num_threads(max(1, int(spec["threads"])))
    return train_worker(spec)


@dataclass(frozen=True)
class RayTrainLauncher:
    """``launcher(spec, workers)``: train a cell on ``workers`` Ray Train workers, return rank 0's record."""

    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    storage: str | None = None  # Ray Train's run state (default: next to the cell's work dir)
    max_failures: int = 1  # worker-group restarts (e.g. a worker node lost)

    def __call__(self, spec: dict[str, Any], workers: int) -> dict[str, Any]:
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        use_gpu = self.gpus_per_worker > 0
        resources = {"CPU": self.cpus_per_worker} | ({"GPU": self.gpus_per_worker} if use_gpu else {})
        workdir = Path(spec["workdir"])
        trainer = TorchTrainer(
            _worker,
            train_loop_config=spec | {"threads": self.cpus_per_worker},
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ScalingConfig(
                num_workers=workers, use_gpu=use_gpu, resources_per_worker=resources
            ),
            run_config=RunConfig(
                name=f"train-{workdir.parent.name}",
                storage_path=self.storage or str(workdir / "ray"),
                failure_config=FailureConfig(max_failures=self.max_failures),
            ),
        )
        result = trainer.fit()
        if result.error is not None or not result.return_value:
            first = str(result.error).strip().splitlines()[-1] if result.error else "no record from rank 0"
            raise PrivauditorError(f"distributed training of {workdir.parent.name} failed: {first}")
        return result.return_value
