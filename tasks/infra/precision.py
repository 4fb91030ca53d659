"""A cell's numeric precision (``train.precision``): ``fp32`` or ``bf16-mixed``.

``bf16-mixed`` is the standard mixed-precision recipe (PyTorch's automatic mixed precision, Lightning's
``bf16-mixed``, peft's ``autocast_adapter_dtype``): every forward pass, in training and in scoring, runs
under bf16 autocast; every *trained* parameter is kept, and updated by AdamW, in float32 (its master copy:
AdamW's small updates would round away in bf16); every frozen weight is stored in bf16. Full fine-tuning
therefore keeps all its weights in float32 and computes in bf16. DeepSpeed's engine reads the same setting
as its own ``bf16`` config (``distributed.py``): bf16 weights, float32 master copies in its optimizer.

The recipe is applied the same way on every device (a CPU has bf16 autocast too), so a cell's numbers
depend on its precision, not on the machine that ran it; the precision is part of the spec and the cell id.
``auto`` (the default) follows the weights' loaded dtype: a model loaded in float32 (every offline tiny
base, the packaged real base) runs ``fp32``, so no CPU score moves; one loaded in bfloat16 or float16 (the
registered 1-7 B shapes say ``dtype: bfloat16``) runs ``bf16-mixed``, never pure bf16.

Example::

    model = to_precision(apply_seeded(technique, loaded.model, loaded.family, 0), "bf16-mixed")
    with autocast(model):
        loss = model(**batch).loss
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .errors import PrivauditorError, unknown_name_message

PRECISIONS = ("fp32", "bf16-mixed")
SETTINGS = ("auto", *PRECISIONS)
#: the attribute :func:`to_precision` sets on a model (read by :func:`precision_of`)
ATTRIBUTE = "privauditor_precision"


def check_setting(value: str) -> None:
    """A one-line error unless ``value`` is ``auto`` or a precision."""
    if value not in SETTINGS:
        raise PrivauditorError(
            "train.precision: " + unknown_name_message("precision", str(value), list(SETTINGS))
        )


def resolve_precision(setting: str, dtype: str) -> str:
    """The precision a cell runs at: ``setting`` itself, or for ``auto`` the one the weights' loaded
    ``dtype`` (a ``ModelSpec.dtype``: ``float32``, ``bfloat16``, ``float16``) implies."""
    check_setting(setting)
    if setting != "auto":
        return setting
    return "fp32" if dtype == "float32" else "bf16-mixed"


def to_precision(model: Any, precision: str) -> Any:
    """``model`` with its parameters stored as ``precision`` says (in place; returns the model): under
    ``bf16-mixed`` trained ones (``requires_grad``) in float32 and frozen ones in bf16, under ``fp32``
    every one in float32. Call it after the technique is applied, so new weights are initialised in
    float32 whatever the precision. Buffers (rotary tables, masks) keep their dtypes."""
    import torch

    if precision not in PRECISIONS:
        raise PrivauditorError(unknown_name_message("precision", str(precision), list(PRECISIONS)))
    for parameter in model.parameters():
        if not parameter.is_floating_point():
            continue
        mixed = precision == "bf16-mixed" and not parameter.requires_grad
        wanted = torch.bfloat16 if mixed else torch.float32
        if parameter.dtype != wanted:
            parameter.data = parameter.data.to(wanted)
    setattr(model, ATTRIBUTE, precision)
    return model


def precision_of(model: Any) -> str:
    """The precision :func:`to_precision` gave ``model`` (``fp32`` for a model it never saw)."""
    return getattr(model, ATTRIBUTE, None) or "fp32"


@contextlib.contextmanager
def autocast(model: Any) -> Iterator[None]:
    """bf16 autocast on ``model``'s device when it runs ``bf16-mixed``; nothing otherwise."""
    if precision_of(model) != "bf16-mixed":
        yield
        return
    import torch

    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=torch.bfloat16):
        yield
