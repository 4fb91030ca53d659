"""One device's memory for a cell, part by part, at the cell's precision (``train.precision``).

The widths follow the precision's recipe (``tasks/infra/precision.py``):

- ``bf16-mixed``: frozen weights in bf16 (2 bytes); every trained parameter in fp32 with an fp32
  gradient and AdamW's two fp32 moments (16 bytes); activations in bf16 under autocast; the logits'
  log-softmax in fp32. Full fine-tuning therefore keeps 16 bytes per parameter.
- ``fp32``: every weight in fp32 (4 bytes), a trained one 16 bytes with its gradient and moments;
  activations in fp32.

Under DeepSpeed, ZeRO partitions what trains (:func:`~privauditor.orchestrator.plan.costs.zero_state_bytes`):
DeepSpeed's own mixed-precision estimate under ``bf16-mixed`` (its bf16 mode), fp32 weights under ``fp32``.
Scoring holds the same weights as training does (bf16 frozen and fp32 trained ones under ``bf16-mixed``)
and a batch's logits with their fp32 log-softmax. A technique that trains nothing holds every weight frozen.

Activations (:func:`~privauditor.orchestrator.plan.costs.activation_bytes`), for ``L`` layers of width
``h``, a micro-batch of ``b`` sequences of ``s`` tokens, ``V`` the vocabulary and ``w`` the activation width
in bytes::

    without checkpointing:  (w/2) · 34·s·b·h·L                + b·s·V·(w + 8)
    with checkpointing:     (w/2) · (2·s·b·h·L + 34·s·b·h)    + b·s·V·(w + 8)

``34·s·b·h`` is one layer's activations at 16 bits (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", eq. 1, ``sbh(34 + 5as/h)``, without the ``5as/h`` attention
scores that fused attention kernels do not keep); ``2·s·b·h·L`` is what full recomputation keeps, each
layer's 16-bit input (the same paper, section 5); the one layer's ``34·s·b·h`` is the layer the backward
recomputes at a time (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", section 3, with a
checkpoint at every layer boundary). An encoder-decoder adds its encoder's layers over the source tokens
the same way. The logits' term (the fp32 log-softmax and its gradient) is outside the checkpointed layers
and stays. ``train.gradient_checkpointing`` also costs one more forward per training step
(:func:`~privauditor.orchestrator.plan.work.cell_work`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError, unknown_name_message

from .costs import activation_bytes, plain_state_bytes, zero_state_bytes
from .work import CellWork

#: bytes of a frozen weight and of an activation at each precision
WIDTHS = {"fp32": (4, 4), "bf16-mixed": (2, 2)}
TRAINED_WEIGHT = 4  # a trained parameter is fp32 at every precision


@dataclass(frozen=True)
class Memory:
    """The bytes one device holds for a cell, by part; its peak is the larger of scoring and training."""

    precision: str
    frozen: int  # frozen weights while training (ZeRO-3: this device's partition)
    trained: int  # trained parameters' weights, gradients and AdamW moments (ZeRO's share under DeepSpeed)
    defence: int  # a defence's training state (DP-SGD's per-sample gradients)
    activations: int  # a micro-batch's activations and logits kept for the backward
    scoring_weights: int  # every weight while scoring
    logits: int  # a scoring batch's logits and their fp32 log-softmax

    @property
    def training(self) -> int:
        return self.frozen + self.trained + self.defence + self.activations

    @property
    def scoring(self) -> int:
        return self.scoring_weights + self.logits

    @property
    def peak(self) -> int:
        return max(self.scoring, self.training)


def cell_precision(spec: Any) -> str:
    """The precision a resolved cell runs at (a spec without one: ``auto``'s, by its model's dtype)."""
    from privauditor.tasks.infra.precision import resolve_precision
    from privauditor.tasks.models import resolve_model

    found = getattr(spec.train, "precision", None)
    return found or resolve_precision("auto", resolve_model(spec.model).dtype)


def checkpointing_of(spec: Any) -> bool:
    """Whether a cell trains with gradient checkpointing (``train.gradient_checkpointing``)."""
    return bool(getattr(spec.train, "gradient_checkpointing", False))


def memory_parts(spec: Any, cw: CellWork, checkpointing: bool | None = None) -> Memory:
    """The most one device holds for the cell ``spec`` whose work is ``cw``, part by part, at
    ``max_length`` tokens: scoring (weights and a batch's logits) or training (weights, gradients and
    optimizer states, as ZeRO partitions them under DeepSpeed; activations, recomputed per layer with
    gradient checkpointing: ``checkpointing``, None for the spec's own setting; a defence's state)."""
    from privauditor.tasks.defences import get_defence

    precision = cell_precision(spec)
    if precision not in WIDTHS:
        raise PrivauditorError(unknown_name_message("precision", str(precision), list(WIDTHS)))
    weight, activation = WIDTHS[precision]
    shape, seq = cw.shape, spec.train.max_length
    trains = cw.technique.trains
    trainable = cw.trainable if trains else 0
    frozen = shape.total_params + cw.added - trainable
    scoring_weights = frozen * weight + trainable * TRAINED_WEIGHT
    logits = spec.score.batch_size * seq * shape.vocab * (activation + 4)
    if not trains:
        return Memory(precision, 0, 0, 0, 0, scoring_weights, logits)
    ds, workers = spec.train.deepspeed, max(1, spec.train.workers)
    if ds is None:
        frozen_bytes = plain_state_bytes(frozen, 0, weight)
        trained = plain_state_bytes(0, trainable)
    else:  # the frozen weights (partitioned by ZeRO-3), and ZeRO's states of what trains
        frozen_bytes = frozen * weight // (workers if ds.stage == 3 else 1)
        stage = max(ds.stage, 1)
        largest = shape.largest_layer_params
        trained = zero_state_bytes(trainable, largest, stage, workers, 1, ds.offload, weight)[1]
    defence = get_defence(spec.defence)
    extra = defence.extra_memory(trainable, spec.train.batch_size) if defence is not None else 0
    micro = math.ceil(spec.train.batch_size / workers)
    source = seq if shape.seq2seq else 0
    recompute = checkpointing_of(spec) if checkpointing is None else checkpointing
    activations = activation_bytes(shape, seq, micro, activation, source, recompute)
    return Memory(precision, frozen_bytes, trained, extra, activations, scoring_weights, logits)
