"""Bottleneck adapters shared by ``adapter_h``, ``adapter_p`` and ``parallel``.

An adapter is down-projection (d→r), non-linearity, up-projection (r→d) (Houlsby et al. 2019,
https://arxiv.org/abs/1902.00751). It is attached to a frozen base by forward hooks on the base's own
``nn.Linear`` / transformers ``Conv1D`` modules, in one of four ways:

- serial on a module's output: ``y' = y + A(y)``;
- serial on the shared input of an MLP's input projections: ``x' = x + A(x)``, one adapter per MLP
  even where the MLP is gated (LLaMA's ``gate_proj``/``up_proj``, T5's ``wi_0``/``wi_1`` see one ``x'``);
- parallel beside a module: ``y' = f(x) + s·A(x)``;
- parallel beside a whole MLP: ``y' = MLP(x) + s·A(x)``, with ``x`` taken at the MLP's input projections
  and the sum made at its output projection. Hooking the MLP module itself would not do: BLOOM's adds
  the residual, and OPT has no MLP module (``fc1``/``fc2`` sit in the decoder layer).

The up-projection starts at zero, so a freshly attached adapter leaves the base's outputs unchanged.
Adapters are registered as submodules (``<target>.bottleneck``, ``<mlp parent>.bottleneck_mlp_in`` or
``.bottleneck_mlp``), so ``named_parameters``, ``.to()`` and the default save/load see them. Hooks are
small objects (not closures), so ``copy.deepcopy`` of an adapted model rewires them to the copy.
Torch is imported inside functions: plugin discovery (``privauditor ls``) must not load it.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict
from typing import Any, ClassVar

from ..infra.errors import PrivauditorError, unknown_name_message
from ._base import Adaptation, freeze, modules_matching

NON_LINEARITIES = ("tanh", "relu", "gelu")
_ATTRIBUTES = ("bottleneck", "bottleneck_mlp_in", "bottleneck_mlp")


def make_bottleneck(d_in: int, d_out: int, rank: int, non_linearity: str, dropout: float, like: Any) -> Any:
    """A ``Sequential(dropout, down, act, up)`` adapter with a zero up-projection, on ``like``'s device.

    Houlsby's parameterisation, with biases (2dr + d + r for d→d). LLM-Adapters has no biases and by
    default draws the up-projection from N(0, 0.02), so its adapters do not start as the identity; we
    zero it so that adapting starts exactly at the base model. Adapters of a 16-bit base are kept in
    float32 (as LLM-Adapters and peft do): small AdamW updates of bf16 weights round away. The hooks
    cast activations to the adapter's dtype and back.
    """
    import torch
    from torch import nn

    dtype = like.dtype if like.is_floating_point() and like.element_size() >= 4 else torch.float32
    act = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}[non_linearity]()
    adapter = nn.Sequential(
        OrderedDict(
            dropout=nn.Dropout(dropout), down=nn.Linear(d_in, rank), act=act, up=nn.Linear(rank, d_out)
        )
    ).to(device=like.device, dtype=dtype)
    nn.init.zeros_(adapter.up.weight)
    nn.init.zeros_(adapter.up.bias)
    return adapter


def _run(adapter: Any, x: Any, scale: float = 1.0) -> Any:
    out = adapter(x.to(adapter.down.weight.dtype)).to(x.dtype)
    return out if scale == 1.0 else out * scale


def _dims(module: Any, name: str) -> tuple[int, int]:
    """(input, output) features of a ``nn.Linear`` or a transformers ``Conv1D`` (weight is (in, out))."""
    if hasattr(module, "in_features"):
        return module.in_features, module.out_features
    if hasattr(module, "nf"):
        return module.weight.shape[0], module.nf
    raise PrivauditorError(
        f"bottleneck adapters attach to Linear/Conv1D modules, not '{name}' ({type(module).__name__})"
    )


class _SerialOutput:
    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def __call__(self, module: Any, args: tuple, output: Any) -> Any:
        return output + _run(self.adapter, output)


class _Parallel:
    def __init__(self, adapter: Any, scale: float) -> None:
        self.adapter, self.scale = adapter, scale

    def __call__(self, module: Any, args: tuple, output: Any) -> Any:
        return output + _run(self.adapter, args[0], self.scale)


class _MlpInput:
    """One adapter on the input shared by an MLP's input projections.

    ``serial``: every input projection gets ``x + A(x)``, computed once per forward (the second gated
    projection receives the same ``x`` object and gets the cached result). Otherwise the input is only
    remembered, and ``output_hook`` on the output projection adds ``s·A(x)`` (parallel beside the MLP).
    """

    def __init__(self, adapter: Any, serial: bool, scale: float = 1.0) -> None:
        self.adapter, self.serial, self.scale = adapter, serial, scale
        self.input: Any = None
        self.adapted: Any = None

    def pre_hook(self, module: Any, args: tuple) -> tuple | None:
        x = args[0]
        if x is not self.input:
            self.input = x
            self.adapted = x + _run(self.adapter, x) if self.serial else None
        return (self.adapted, *args[1:]) if self.serial else None

    def output_hook(self, module: Any, args: tuple, output: Any) -> Any:
        x, self.input, self.adapted = self.input, None, None  # do not hold activations between forwards
        return None if self.serial else output + _run(self.adapter, x, self.scale)


@dataclasses.dataclass
class BottleneckAdaptation(Adaptation):
    """Hyper-parameters and attachment shared by the three bottleneck-adapter techniques."""

    #: Bottleneck width r. None: min(256, hidden // 2) — LLM-Adapters' 256 on 7B bases (hidden 4096), and
    #: 64 on the 128-wide tiny bases, where 256 would be a 2x *expansion*, not a bottleneck.
    bottleneck: int | None = None
    #: tanh, as LLM-Adapters (and so PrivAuditor) uses; "relu" and "gelu" are allowed.
    non_linearity: str = "tanh"
    #: Dropout on the adapter's input; 0 as LLM-Adapters, and the tiny bases train without dropout.
    dropout: float = 0.0
    #: "privauditor" (LLM-Adapters' placement, the default so results compare) or "paper".
    placement: str = "privauditor"

    placements: ClassVar[tuple[str, ...]] = ("privauditor", "paper")
    # LLM-Adapters trains bottleneck adapters at 3e-4 on 7B bases. A cell on a tiny base runs only a few
    # dozen optimizer steps from a zero up-projection: at 1e-3 AdapterP moved the training loss by 0.02
    # nats in 3 epochs (tiny-bloom, finance), at 1e-2 by 0.14, so the default is 1e-2 (benchmarks/
    # adaptation_table.py measures every pair); paper-scale sweeps set 3e-4.
    default_lr: ClassVar[float] = 1e-2
    default_epochs: ClassVar[int] = 3  # LLM-Adapters' 3 epochs
    starts_as_base: ClassVar[bool] = True  # the up-projection starts at zero

    def __post_init__(self) -> None:
        for field, value, known in (
            ("placement", self.placement, self.placements),
            ("non_linearity", self.non_linearity, NON_LINEARITIES),
        ):
            if value not in known:
                raise PrivauditorError(
                    f"adaptation '{self.name}': {unknown_name_message(field, value, list(known))}"
                )
        if self.bottleneck is not None and (type(self.bottleneck) is not int or self.bottleneck < 1):
            raise PrivauditorError(
                f"adaptation '{self.name}': bottleneck must be a positive int or null "
                f"(null: min(256, d // 2)), not {self.bottleneck!r}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise PrivauditorError(
                f"adaptation '{self.name}': dropout must be in [0, 1), not {self.dropout!r}"
            )

    def rank(self, hidden: int) -> int:
        """The bottleneck width for an adapter whose input has ``hidden`` features."""
        return self.bottleneck if self.bottleneck is not None else max(1, min(256, hidden // 2))

    def attach(
        self,
        model: Any,
        *,
        serial_output: tuple[str, ...] = (),
        serial_mlp_input: tuple[str, ...] = (),
        parallel: tuple[str, ...] = (),
        parallel_mlp: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
        scale: float = 1.0,
    ) -> Any:
        """Freeze ``model`` and attach adapters at the modules ending in the given suffixes.

        Args:
            model: the base model (modified in place and returned).
            serial_output: modules that get ``y + A(y)`` on their output.
            serial_mlp_input: an MLP's input projections; one ``x + A(x)`` per MLP on their shared input.
            parallel: modules that get ``f(x) + scale·A(x)``.
            parallel_mlp: (input projections, output projection) of MLPs that get ``MLP(x) + scale·A(x)``.
            scale: multiplies parallel adapters' outputs (He et al.'s ``s``).
        """
        attached = [n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1] in _ATTRIBUTES]
        if attached:
            raise PrivauditorError(
                f"adaptation '{self.name}': the model already has bottleneck adapters ('{attached[0]}'); "
                "apply an adaptation to a fresh base"
            )
        # Resolve every site (and its sizes) before changing anything: a bad map leaves the model as it was.
        per_module = [("output", m, *_dims(m, n)) for n, m in self._match(model, serial_output)]
        per_module += [("parallel", m, *_dims(m, n)) for n, m in self._match(model, parallel)]
        per_mlp = []
        requests = [("mlp_in", serial_mlp_input, ())] if serial_mlp_input else []
        requests += [("mlp", *parallel_mlp)] if parallel_mlp else []
        for kind, ins, outs in requests:
            inputs: dict[str, list] = defaultdict(list)
            for n, m in self._match(model, ins):
                inputs[n.rpartition(".")[0]].append(m)
            output_of = {n.rpartition(".")[0]: m for n, m in self._match(model, outs)} if outs else {}
            for parent, modules in inputs.items():
                widths = {_dims(m, parent)[0] for m in modules}
                if len(widths) != 1 or (outs and parent not in output_of):
                    raise PrivauditorError(
                        f"adaptation '{self.name}': '{parent}' is not an MLP with one input"
                    )
                out = output_of.get(parent)
                d_in = widths.pop()
                per_mlp.append(
                    (kind, parent, modules, out, d_in, _dims(out, parent)[1] if out is not None else d_in)
                )

        freeze(model)
        for kind, module, d_in, d_out in per_module:
            adapter = self._new(d_out if kind == "output" else d_in, d_out, module.weight)
            module.add_module("bottleneck", adapter)
            module.register_forward_hook(
                _SerialOutput(adapter) if kind == "output" else _Parallel(adapter, scale)
            )
        for kind, parent, modules, out, d_in, d_out in per_mlp:
            adapter = self._new(d_in, d_out, modules[0].weight)
            model.get_submodule(parent).add_module(f"bottleneck_{kind}", adapter)
            site = _MlpInput(adapter, serial=kind == "mlp_in", scale=scale)
            for module in modules:
                module.register_forward_pre_hook(site.pre_hook)
            # After the MLP: add the parallel branch ("mlp"), and forget the remembered input either way.
            (out if out is not None else model.get_submodule(parent)).register_forward_hook(site.output_hook)
        return model

    def _new(self, d_in: int, d_out: int, like: Any) -> Any:
        return make_bottleneck(d_in, d_out, self.rank(d_in), self.non_linearity, self.dropout, like)

    def _match(self, model: Any, suffixes: tuple[str, ...]) -> list[tuple[str, Any]]:
        matches = modules_matching(model, suffixes) if suffixes else []
        if suffixes and not matches:
            raise PrivauditorError(
                f"adaptation '{self.name}' (placement '{self.placement}') found no module ending in "
                f"{', '.join(suffixes)} in {type(model).__name__}"
            )
        return matches
