"""Per-sample gradients, batched: one forward and one backward pass per batch, whatever the model.

:func:`per_sample_gradients` gives, for every sample of a batch, the gradient of that sample's own loss
with respect to chosen parameters. It works per *owner module* (the module that holds a parameter; for a
parameter container such as peft's IA3 vectors, the module that calls it): every call of an owner records
its inputs, one backward pass of the summed per-sample losses gives the gradient at each call's outputs
(one row per sample, since samples do not interact), and ``torch.func`` vectorises the owner's own
vector-Jacobian product over the batch (``vmap`` of ``vjp`` of the module's forward). A module is small (a
projection, a norm, an attention block), so this never traces the whole model, whose mask code branches
on data and defeats a model-level ``vmap`` (tried: it fails on every family here, and on BLOOM for its
custom autograd functions).

Which inputs and outputs of a call carry the batch is measured, not guessed from shapes: a probe runs the
model, without gradients, on the batch with its last row repeated, and takes the dimension that grew by
one. The batch keeps its padding that way, so the model takes the same paths (an attention mask is
``None`` when no row is padded, a tensor when one is); the answer is kept per such pattern of each call's
inputs, so a model is probed about twice. Two things keep calls batched:
learned position tables get positions per sample (``position_ids``, the values the model would use), and
peft's prompt encoders (prompt tuning, P-tuning) are called per sample, where peft calls them once and
repeats the result (huggingface/peft#2043; the values are the same). A parameter left in a call that
carries no batch dimension (T5's relative-position bias, computed once for every sample), or used outside
its module's forward, gets its per-sample gradients one sample at a time: exact, and only for those.

Used by the ``grad_norm`` view (the GradNorm attack); meant for per-sample clipping in DP training.
Dropout inside an owner module would draw other masks when its forward is recomputed: use eval mode.

Example::

    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    grads = per_sample_gradients(model, batch, lambda m, b: target_nll(m, b, seq2seq=False), params)
"""

from __future__ import annotations

import contextlib
import inspect
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import functional_call, vjp, vmap
from torch.utils._pytree import tree_flatten, tree_unflatten

#: ``(model, batch) -> one loss per sample``
LossFn = Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]
_CONTAINERS = (torch.nn.ParameterDict, torch.nn.ParameterList)


def target_nll(model: Any, batch: dict[str, torch.Tensor], seq2seq: bool) -> torch.Tensor:
    """Per sample, the mean NLL of its target tokens (``labels`` other than -100): what the model's own
    loss is for that sample alone. Virtual tokens in front of the logits are sliced off."""
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    if seq2seq:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        inputs["decoder_input_ids"] = base.prepare_decoder_input_ids_from_labels(labels=labels)
        logits = model(**inputs).logits
    else:
        if _takes_positions(model):  # right padding: every sample's positions are 0, 1, 2, ...
            width = labels.shape[1]
            inputs["position_ids"] = torch.arange(width, device=labels.device).expand(labels.shape[0], width)
        logits = model(**inputs, use_cache=False).logits
        logits, labels = logits[:, logits.shape[1] - labels.shape[1] :][:, :-1], labels[:, 1:]
    scored = labels != -100  # the target positions only: no loss on the prompt and the padding
    nll = torch.nn.functional.cross_entropy(logits[scored].float(), labels[scored], reduction="none")
    sample = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(labels)[scored]
    total = torch.zeros(labels.shape[0], dtype=nll.dtype, device=nll.device).index_add(0, sample, nll)
    return total / scored.sum(1).clamp_min(1)


def _takes_positions(model: Any) -> bool:
    """The model accepts per-sample ``position_ids`` (peft's prompt learning ignores them, with a warning)."""
    config = getattr(model, "active_peft_config", None)
    if config is not None and config.is_prompt_learning:
        return False
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "position_ids" in inspect.signature(base.forward).parameters


@dataclass
class _Call:
    """One call of an owner module: inputs and outputs as flat pytree leaves, and their batch dims."""

    args: list[Any]
    args_spec: Any
    outputs: list[Any]
    arg_dims: list[int | None]
    out_dims: list[int | None]


def _owners(model: Any, params: dict[str, torch.nn.Parameter]) -> dict[Any, dict[str, str]]:
    """module → {parameter path inside it: name in ``params``}, for every module that holds (or, for a
    parameter container, calls the holder of) one of ``params``. A tied parameter has several owners."""
    wanted = {id(p): name for name, p in params.items()}
    owners: dict[Any, dict[str, str]] = {}
    for _, module in model.named_modules():
        if isinstance(module, _CONTAINERS):
            continue
        holders = [("", module)] + [(n, c) for n, c in module.named_children() if isinstance(c, _CONTAINERS)]
        for prefix, holder in holders:
            for local, parameter in holder.named_parameters(recurse=False):
                if id(parameter) in wanted:
                    owners.setdefault(module, {})[f"{prefix}.{local}".lstrip(".")] = wanted[id(parameter)]
    return owners


@contextlib.contextmanager
def _recording(
    owners: dict[Any, dict[str, str]], shapes_only: bool = False
) -> Iterator[dict[Any, list[tuple[list, Any, list]]]]:
    """Forward hooks on the owners: every call's (input leaves, input spec, output leaves); with
    ``shapes_only``, tensors are kept as empty tensors of their shape on the meta device."""

    def keep(leaves: list) -> list:
        if not shapes_only:
            return leaves
        return [torch.empty(x.shape, device="meta") if isinstance(x, torch.Tensor) else x for x in leaves]

    calls: dict[Any, list[tuple[list, Any, list]]] = {m: [] for m in owners}

    def record(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        leaves, spec = tree_flatten((args, kwargs))
        calls[module].append((keep(leaves), spec, keep(tree_flatten(output)[0])))

    handles = [m.register_forward_hook(record, with_kwargs=True) for m in owners]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _batched_prompts(model: Any) -> Iterator[None]:
    """peft's prompt tuning and P-tuning encode the virtual tokens of one sample and repeat them for the
    batch; here every sample's are encoded (the same values), so the encoder's calls carry the batch."""
    config = getattr(model, "active_peft_config", None)
    if config is None or config.peft_type not in ("PROMPT_TUNING", "P_TUNING"):
        yield
        return

    def get_prompt(
        self: Any, batch_size: int, task_ids: Any = None, max_cache_len: Any = None
    ) -> torch.Tensor:
        encoder = self.prompt_encoder[self.active_adapter]
        tokens = self.prompt_tokens[self.active_adapter].to(encoder.embedding.weight.device)
        return encoder(tokens.unsqueeze(0).expand(batch_size, -1))

    model.get_prompt = types.MethodType(get_prompt, model)
    try:
        yield
    finally:
        del model.get_prompt


def _batch_dim(real: Any, grown: Any) -> int | None:
    """The dimension that grew by one from the real call to the probe's (one row more), if any."""
    if not isinstance(real, torch.Tensor) or not isinstance(grown, torch.Tensor) or real.dim() != grown.dim():
        return None
    grew = [d for d in range(real.dim()) if grown.shape[d] == real.shape[d] + 1]
    return grew[0] if len(grew) == 1 else None


def _pattern(recorded: dict[Any, list[tuple[list, Any, list]]]) -> tuple:
    """Which leaves of every recorded call are tensors: the paths the model took."""
    return tuple(
        (id(module), tuple(tuple(isinstance(x, torch.Tensor) for x in side) for side in (args, outputs)))
        for module, calls in recorded.items()
        for args, _, outputs in calls
    )


def _probe(
    model: Any, owners: dict, batch: dict[str, torch.Tensor], loss_fn: LossFn, recorded: dict[Any, list]
) -> dict[Any, list]:
    """Each recorded call's batch dimensions (inputs, outputs): the model run again, without gradients,
    on the batch with its last row repeated, and the dimensions that grew by one."""
    grown = {k: torch.cat([v, v[-1:]]) for k, v in batch.items()}
    with torch.no_grad(), _recording(owners, shapes_only=True) as probed:
        loss_fn(model, grown)
    if _pattern(probed) != _pattern(recorded):
        raise RuntimeError("the model took other paths for one more row: per-sample gradients need the same")
    return {
        module: [
            (
                [_batch_dim(a, b) for a, b in zip(real[0], more[0], strict=True)],
                [_batch_dim(a, b) for a, b in zip(real[2], more[2], strict=True)],
            )
            for real, more in zip(recorded[module], probed[module], strict=True)
        ]  # fmt: skip
        for module in owners
    }


def per_sample_gradients(
    model: Any,
    batch: dict[str, torch.Tensor],
    loss_fn: LossFn,
    params: dict[str, torch.nn.Parameter],
    layouts: dict[tuple, dict[Any, list]] | None = None,
) -> dict[str, torch.Tensor]:
    """Per sample of ``batch``, the gradient of its loss (``loss_fn(model, batch)`` gives one per sample)
    with respect to each of ``params``: name → float32 tensor of shape (batch size, *parameter shape).
    ``layouts``: a dict kept across batches of the same model, loss and parameters, where the probes'
    findings are remembered. Every forward runs at the model's precision (tasks/infra/precision.py)."""
    from ..infra.precision import autocast

    with autocast(model):
        return _per_sample(model, batch, loss_fn, params, layouts)


def _per_sample(
    model: Any,
    batch: dict[str, torch.Tensor],
    loss_fn: LossFn,
    params: dict[str, torch.nn.Parameter],
    layouts: dict[tuple, dict[Any, list]] | None,
) -> dict[str, torch.Tensor]:
    size = next(iter(batch.values())).shape[0]
    if size == 1:  # one sample: its gradient is the batch's
        return dict(_sample_by_sample(model, batch, loss_fn, params))
    owners = _owners(model, params)
    layouts = {} if layouts is None else layouts
    out = {n: torch.zeros(size, *p.shape, dtype=torch.float32, device=p.device) for n, p in params.items()}
    with _batched_prompts(model):
        with _recording(owners) as recorded, torch.enable_grad():
            losses = loss_fn(model, batch)
        pattern = _pattern(recorded)
        if pattern not in layouts:
            layouts[pattern] = _probe(model, owners, batch, loss_fn, recorded)
        dims = layouts[pattern]
        calls: list[tuple[Any, _Call]] = []
        reached: set[str] = set()  # parameters with at least one batched call
        unbatched: set[str] = set()
        for module, found in recorded.items():
            for index, (args, spec, outputs) in enumerate(found):
                arg_dims, out_dims = dims[module][index]
                live = [d for o, d in zip(outputs, out_dims, strict=True) if _differentiable(o)]
                if not live:
                    continue
                if any(d is None for d in live):
                    unbatched.update(owners[module].values())
                    continue
                calls.append((module, _Call(args, spec, outputs, arg_dims, out_dims)))
                reached.update(owners[module].values())
        one_at_a_time = sorted(unbatched | (set(params) - reached))
        targets = [o for _, call in calls for o in call.outputs if _differentiable(o)]
        if targets:
            cotangents = iter(torch.autograd.grad(losses.sum(), targets, allow_unused=True))
            for module, call in calls:
                grads = [next(cotangents) if _differentiable(o) else None for o in call.outputs]
                for name, value in _module_grads(module, owners[module], call, grads).items():
                    if name not in unbatched:
                        out[name] += value
        del losses, recorded, calls, targets
        for name, value in _sample_by_sample(model, batch, loss_fn, {n: params[n] for n in one_at_a_time}):
            out[name] = value
    return out


def _differentiable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _module_grads(
    module: Any, paths: dict[str, str], call: _Call, cotangents: list[Any]
) -> dict[str, torch.Tensor]:
    """Per-sample gradients of ``module``'s own parameters from one call: ``vmap`` over the batch of the
    ``vjp`` of the module's forward at the recorded inputs, with the per-sample output cotangents."""
    named = dict(module.named_parameters())
    primals = {path: named[path].detach() for path in paths}
    leaves = [a.detach() if isinstance(a, torch.Tensor) else a for a in call.args]
    mapped = [i for i, d in enumerate(call.arg_dims) if d is not None]
    keep = [i for i, g in enumerate(cotangents) if g is not None]
    if not keep:  # no output of this call reached the loss
        return {}

    def one(rows: list[torch.Tensor], cotangent_rows: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        inputs = list(leaves)
        for i, row in zip(mapped, rows, strict=True):
            inputs[i] = row.unsqueeze(call.arg_dims[i])
        args, kwargs = tree_unflatten(inputs, call.args_spec)

        def forward(p: dict[str, torch.Tensor]) -> list[torch.Tensor]:
            outputs = tree_flatten(functional_call(module, p, args, kwargs))[0]
            return [outputs[i] for i in keep]

        _, pull = vjp(forward, primals)
        rows_back = [c.unsqueeze(call.out_dims[i]) for i, c in zip(keep, cotangent_rows, strict=True)]
        return pull(rows_back)[0]

    in_dims = ([call.arg_dims[i] for i in mapped], [call.out_dims[i] for i in keep])
    with warnings.catch_warnings():  # attention's vmap falls back to a loop on CPU, correct but noisy
        warnings.filterwarnings("ignore", "There is a performance drop because we have not yet implemented")
        result = vmap(one, in_dims=in_dims)([leaves[i] for i in mapped], [cotangents[i] for i in keep])
    return {paths[path]: value.float() for path, value in result.items()}


def _sample_by_sample(
    model: Any, batch: dict[str, torch.Tensor], loss_fn: LossFn, params: dict[str, torch.nn.Parameter]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Per-sample gradients of ``params`` with one backward pass per sample (the exact fallback)."""
    if not params:
        return
    size = next(iter(batch.values())).shape[0]
    rows = []
    for i in range(size):
        with torch.enable_grad():
            loss = loss_fn(model, {k: v[i : i + 1] for k, v in batch.items()})[0]
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        rows.append(
            [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params.values(), strict=True)]
        )
    for j, name in enumerate(params):
        yield name, torch.stack([row[j] for row in rows]).float()


#: per-sample gradients held at once (float32 numbers): the batch shrinks for models with many trainable
#: parameters (256 MB here; a 1.4 M-parameter full fine-tune still takes 16 texts a batch)
BUDGET = 1 << 26


def gradient_norms(
    model: Any,
    tokenizer: Any,
    examples: Any,
    max_length: int,
    seq2seq: bool,
    norm: float = 2.0,
    batch_size: int = 16,
) -> Any:
    """Per example, the ``norm``-norm of the gradient of its mean target NLL with respect to the trainable
    parameters, taken as one vector; a model with none trainable (``none``) uses all its parameters.
    Returns a float64 numpy array in the examples' order."""
    import numpy as np

    from ..infra.deadline import check
    from ..training.loop import collate, encode

    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    frozen = not params
    if frozen:
        params = dict(model.named_parameters())
        for p in params.values():
            p.requires_grad_(True)
    model.eval()
    device = next(model.parameters()).device
    data = encode(tokenizer, examples, max_length, seq2seq)
    order = sorted(range(len(data)), key=lambda i: len(data[i]["input_ids"]) + len(data[i]["labels"]))
    width = max(1, min(batch_size, BUDGET // max(1, sum(p.numel() for p in params.values()))))
    norms = np.zeros(len(data), dtype=np.float64)

    def loss_fn(m: Any, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return target_nll(m, b, seq2seq)

    layouts: dict[tuple, dict[Any, list]] = {}
    try:
        for start in range(0, len(order), width):
            check("gradients")
            rows = order[start : start + width]
            batch = {
                k: v.to(device)
                for k, v in collate([data[i] for i in rows], tokenizer.pad_token_id, seq2seq).items()
            }
            grads = per_sample_gradients(model, batch, loss_fn, params, layouts)
            norms[rows] = _norms(grads, norm)
    finally:
        if frozen:
            for p in params.values():
                p.requires_grad_(False)
    return norms


def _norms(grads: dict[str, torch.Tensor], norm: float) -> Any:
    """Per sample, the ``norm``-norm of all its gradients as one vector. Pieces of 64 k entries are
    reduced in float32 and combined in float64: one float32 reduction over a 52 M-parameter model's
    gradient was measured 0.3 % off on CPU, pieces are 2e-6 off, and casting everything to float64 costs
    ten times as long."""
    pieces = [
        torch.linalg.vector_norm(piece, ord=norm, dim=1).double()
        for g in grads.values()
        for piece in g.flatten(1).split(NORM_PIECE, dim=1)
    ]
    return torch.linalg.vector_norm(torch.stack(pieces), ord=norm, dim=0).cpu().numpy()


NORM_PIECE = 1 << 16
