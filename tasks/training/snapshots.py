"""Snapshots of an adaptation's trainable weights along one training run (``train.checkpoints``).

Training calls :func:`saver`'s callback at each checkpoint; it writes the trainable weights, exactly as
they are, to ``<folder>/step-<s>.safetensors`` (a checkpoint is named by its step: epochs may be fractions) (on disk, not in memory: a full fine-tune of
a large model has one model's worth of weights per snapshot). After training, :func:`load_snapshot`
puts one back into the model before that checkpoint is scored, so scoring never runs inside the
training loop and cannot touch its random numbers, optimizer or mode.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..infra.errors import PrivauditorError


def snapshot_file(folder: Path, step: int) -> Path:
    return Path(folder) / f"step-{step}.safetensors"


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The trainable weights by name, detached copies on the CPU."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_snapshot(state: dict[str, torch.Tensor], folder: Path, step: int) -> None:
    from safetensors.torch import save_file

    Path(folder).mkdir(parents=True, exist_ok=True)
    path = snapshot_file(folder, step)
    save_file({n: t.contiguous() for n, t in state.items()}, str(path.with_suffix(".tmp")))
    path.with_suffix(".tmp").replace(path)


def saver(model: Any, folder: Path) -> Callable[[float, int], None]:
    """The ``on_checkpoint(epoch, step)`` callback of one-process training: snapshot to ``folder``."""
    return lambda epoch, step: save_snapshot(trainable_state(model), folder, step)


def load_snapshot(model: Any, folder: Path, step: int) -> None:
    """Put the snapshot of ``step`` into ``model``'s trainable weights (the technique applied with the
    same seed); every trainable weight must be in it and nothing else."""
    from safetensors.torch import load_file

    restore(model, load_file(str(snapshot_file(folder, step))), f"the step-{step} snapshot")


def restore(model: Any, state: dict[str, torch.Tensor], what: str = "the snapshot") -> None:
    """Copy ``state`` (a :func:`trainable_state`) into ``model``'s trainable weights; every trainable
    weight must be in it and nothing else."""
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(state) != set(trainable):
        missing, extra = sorted(set(trainable) - set(state))[:3], sorted(set(state) - set(trainable))[:3]
        raise PrivauditorError(f"{what} holds other weights (missing {missing}, unexpected {extra})")
    with torch.no_grad():
        for name, value in state.items():
            trainable[name].copy_(value.to(trainable[name].device, trainable[name].dtype))
