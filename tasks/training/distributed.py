"""A cell's adaptation step across data-parallel workers under DeepSpeed ZeRO.

:func:`train_worker` runs on every rank of an initialised ``torch.distributed`` group (Ray Train's
``TorchTrainer`` sets one up; any launcher that does works): each rank loads the base, applies the
technique with the cell's seed, and trains its share of every global batch through a DeepSpeed engine
(ZeRO stage 0-3, optional CPU offload, DeepSpeed's bf16 under ``bf16-mixed``, a plain torch AdamW so
no optimizer kernels are compiled). At every checkpoint the trainable weights are gathered with every
rank taking part (ZeRO-3 partitions them) and rank 0 writes them as a snapshot to ``workdir``, and the
loss record at the end; the cell loads the snapshots into its own model and scores them exactly as after
one-process training. Nothing here imports Ray.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from ..infra.deadline import limit
from .loop import Loop, TrainResult, apply_seeded, train, train_config_of, warmup_then_constant
from .snapshots import save_snapshot

RESULT_FILE = "train.json"


def deepspeed_config(settings: Any, micro_batch: int, precision: str = "fp32") -> dict[str, Any]:
    """The DeepSpeed config for ``train.deepspeed`` settings (stage, offload) at the cell's ``precision``:
    ``bf16-mixed`` is DeepSpeed's own bf16 mode (bf16 weights and compute, float32 master copies in its
    optimizer), ``fp32`` none, on every device (tasks/infra/precision.py)."""
    stage, offload, bf16 = settings.stage, settings.offload, precision == "bf16-mixed"
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        # Partition every parameter (the default keeps those under 1e5 elements whole on each rank, so a
        # small model would never really be sharded); saves gather the whole weights.
        zero["stage3_param_persistence_threshold"] = 0
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if offload:
        zero["offload_optimizer"] = {"device": "cpu"}
        if stage == 3:
            zero["offload_param"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "bf16": {"enabled": bool(bf16)},
        "zero_allow_untested_optimizer": True,  # the client optimizer is torch's AdamW
        "zero_force_ds_cpu_optimizer": False,  # ... also with offload (DeepSpeed's CPU Adam compiles for minutes)
        "steps_per_print": 10**9,
    }


class DeepSpeedStep:
    """One optimisation step through a DeepSpeed engine (same optimizer and schedule as ``LocalStep``)."""

    def __init__(self, settings: Any, micro_batch: int, precision: str = "fp32") -> None:
        self.settings, self.engine = settings, None
        self.config = deepspeed_config(settings, micro_batch, precision)

    def __call__(self, model: Any, parameters: list[Any], lr: float, warmup: int) -> DeepSpeedStep:
        import deepspeed

        optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_constant(warmup))
        self.engine, *_ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            lr_scheduler=scheduler,
            config=self.config,
        )
        return self

    def step(self, batch: dict[str, torch.Tensor], weight: float) -> torch.Tensor:
        batch = {k: v.to(self.engine.device) for k, v in batch.items()}
        loss = self.engine(**batch).loss
        self.engine.backward(loss * weight)
        self.engine.step()
        return loss.detach().float().cpu()

    def gathered_trainable(self, names: list[str]) -> dict[str, torch.Tensor] | None:
        """The trainable weights, whole, on rank 0 (None elsewhere); every rank must call this."""
        import deepspeed

        module, wanted = self.engine.module, set(names)
        params = [p for n, p in module.named_parameters() if n in wanted]
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None, enabled=self.settings.stage == 3):
            if torch.distributed.get_rank() != 0:
                return None
            named = dict(module.named_parameters())
            return {n: named[n].detach().float().cpu().clone() for n in names}


def train_worker(spec: dict[str, Any]) -> dict[str, Any] | None:
    """Train one cell's adaptation on this rank; rank 0 writes the weights and returns the record.

    ``spec``: ``cell`` (the resolved ``CellSpec``), ``workdir`` (where rank 0 writes), ``timeout_s``.
    """
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported
    import deepspeed

    from ..data.splits import draw_split
    from ..datasets import load_dataset
    from ..infra.precision import to_precision
    from ..models import load_model

    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    cell = spec["cell"]  # the resolved CellSpec
    loaded = load_model(cell.model)
    model = to_precision(
        apply_seeded(cell.technique(), loaded.model, loaded.family, seed=cell.seed), cell.train.precision
    )
    if cell.train.gradient_checkpointing:  # before the engine wraps it
        from .checkpointing import enable

        enable(model)
    split = draw_split(load_dataset(cell.dataset), cell.split, cell.seed)
    train_config = train_config_of(cell)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    step = DeepSpeedStep(cell.train.deepspeed, -(-cell.train.batch_size // world), cell.train.precision)
    workdir = Path(spec["workdir"])

    def snapshot(_epoch: float, at: int) -> None:
        state = step.gathered_trainable(names)  # every rank takes part; rank 0 writes
        if state is not None:
            save_snapshot(state, workdir, at)

    with limit(spec.get("timeout_s")):
        result = train(
            model, loaded.tokenizer, split.trained, train_config, loaded.seq2seq,
            Loop(lambda *a: step(*a).step, rank, world, cell.train.checkpoints, on_checkpoint=snapshot),
        )  # fmt: skip
    torch.distributed.barrier()  # every rank's loop checks the same time limit
    if rank != 0:
        return None
    used = step.config["zero_optimization"] | {"bf16": step.config["bf16"]["enabled"]}
    record = result.__dict__ | {"workers": world, "deepspeed": used}
    (workdir / RESULT_FILE).write_text(json.dumps(record))
    return record


def trained_result(workdir: Path) -> TrainResult:
    """The loss record rank 0 wrote; the weights are the snapshots beside it (``snapshots.py``)."""
    record = json.loads((Path(workdir) / RESULT_FILE).read_text())
    fields = ("epochs", "lr", "steps", "seconds", "loss_curve", "epoch_losses")
    return TrainResult(
        **{k: record[k] for k in fields}, checkpoints=[tuple(c) for c in record["checkpoints"]]
    )
