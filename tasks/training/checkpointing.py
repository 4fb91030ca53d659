"""Gradient checkpointing (``train.gradient_checkpointing``): keep only each layer's input in the forward
and recompute the layer's activations in the backward, trading one more forward per step for memory.

:func:`enable` turns Hugging Face's checkpointing on for a model, peft-wrapped or not;
:func:`saved_bytes` measures what a forward pass keeps for the backward, so the planner's activation
formula (``orchestrator/plan/costs.py`` ``activation_bytes``) can be set against a real model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..infra.errors import PrivauditorError

#: ``torch.utils.checkpoint``'s non-reentrant variant: it works when the layer's inputs need no gradient
#: (frozen embeddings), nests, and is the one torch recommends (the reentrant one is deprecated)
CHECKPOINT_KWARGS = {"use_reentrant": False}


def base_model(model: Any) -> Any:
    """The transformers model under a peft wrapper (``model`` itself when it has none)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def enable(model: Any) -> Any:
    """Turn on gradient checkpointing for every decoder (and encoder) layer of ``model``, a transformers
    model or a peft model around one, and return ``model``.

    Non-reentrant checkpointing; the KV cache off (a checkpointed layer cannot return it); and, where the
    input embeddings are frozen (every parameter-efficient technique), ``enable_input_require_grads`` so
    the embeddings' output requires a gradient and the backward reaches the checkpointed layers' adapters
    whichever checkpoint variant runs."""
    base = base_model(model)
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise PrivauditorError(f"{type(base).__name__} does not support gradient checkpointing")
    if hasattr(base, "activation_checkpointing_enable"):  # transformers 5: the new name
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    else:  # transformers 4
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    embeddings = base.get_input_embeddings()
    if embeddings is not None and not embeddings.weight.requires_grad:
        base.enable_input_require_grads()
    if getattr(base.config, "use_cache", None):
        base.config.use_cache = False
    return model


def checkpointed_layers(model: Any) -> list[torch.nn.Module]:
    """The layers of ``model`` that recompute their activations in the backward (checkpointing on)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [
        m
        for m in base_model(model).modules()
        if isinstance(m, GradientCheckpointingLayer) and getattr(m, "gradient_checkpointing", False)
    ]


@dataclass(frozen=True)
class Saved:
    """Bytes a forward pass keeps for the backward, each tensor storage once: in all (``total``: autograd's
    saved tensors and the checkpointed layers' inputs) and those saved inside each decoder or encoder
    layer, in call order (``layers``: with checkpointing on a layer keeps nothing in the forward, and
    saves as much again while the backward recomputes it)."""

    total: int
    layers: tuple[int, ...]


def saved_bytes(model: Any, forward: Callable[[], Any]) -> Saved:
    """What ``forward()`` (one training forward of ``model``) keeps for the backward: the storages of the
    tensors autograd saves (``torch.autograd.graph.saved_tensors_hooks``), counted once by storage
    pointer, and, with checkpointing on, the tensors each checkpointed layer is called with (the
    non-reentrant checkpoint keeps them to recompute from in its own frame, not as saved tensors)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    held = base_model(model)
    seen = {t.untyped_storage().data_ptr() for t in (*held.parameters(), *held.buffers())}  # not activations
    totals = {"all": 0}
    layers: list[int] = []
    running: list[int] = []  # the layer being run, by its index in ``layers``

    def count(tensor: torch.Tensor) -> int:
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        totals["all"] += storage.nbytes()
        return storage.nbytes()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        added = count(tensor)
        if running:
            layers[running[-1]] += added
        return tensor

    def before(module: Any, args: tuple, kwargs: dict) -> None:
        if getattr(module, "gradient_checkpointing", False) and module.training and torch.is_grad_enabled():
            for value in (*args, *kwargs.values()):
                if isinstance(value, torch.Tensor):
                    count(value)
        running.append(len(layers))
        layers.append(0)

    def after(module: Any, args: tuple, output: Any) -> None:
        running.pop()

    found = [m for m in held.modules() if isinstance(m, GradientCheckpointingLayer)]
    handles = [m.register_forward_pre_hook(before, with_kwargs=True) for m in found]
    handles += [m.register_forward_hook(after) for m in found]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            forward()
    finally:
        for handle in handles:
            handle.remove()
    return Saved(totals["all"], tuple(layers))
