"""The ``int8`` form: a model's linear layers dynamically quantised to int8 (CPU)."""

from __future__ import annotations

import warnings
from typing import Any


def dynamic_int8(model: Any, frozen_only: bool = False) -> tuple[Any, dict[str, Any]]:
    """``model`` (changed in place) with each ``nn.Linear`` an int8 dynamically quantised layer
    (torch.ao's ``quantize_dynamic``: int8 weights with a scale per tensor, activations quantised on the
    fly); GPT-2's ``Conv1D`` layers are first made the ``nn.Linear`` layers they compute. A head tied to
    the input embedding is quantised on its own: the embedding stays float. ``frozen_only``: the frozen
    layers alone (an unmerged model's base), every trainable one named and left float, even one registered
    under a frozen layer (which would inherit its setting); the swap keeps a layer's forward hooks, which
    is how the bottleneck adapters attach."""
    import torch
    from transformers.pytorch_utils import Conv1D

    converted = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D) and not (frozen_only and child.weight.requires_grad):
                # y = x W + b with W (in, out): a Linear of weight Wᵀ
                linear = torch.nn.Linear(child.weight.shape[0], child.weight.shape[1])
                linear.requires_grad_(child.weight.requires_grad)
                linear.weight.data.copy_(child.weight.data.T)
                linear.bias.data.copy_(child.bias.data)
                for hooks in ("_forward_hooks", "_forward_pre_hooks"):
                    getattr(linear, hooks).update(getattr(child, hooks))
                linear._modules.update(child._modules)  # an adapter registered under the layer
                setattr(parent, name, linear)
                converted += 1
    config = torch.ao.quantization.default_dynamic_qconfig
    spec = {
        name: None if frozen_only and module.weight.requires_grad else config
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear
    }
    with warnings.catch_warnings():  # torch.ao's dynamic quantisation is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        quantised = torch.ao.quantization.quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
    layers = sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in quantised.modules())
    return quantised.eval(), {"form": "int8", "int8_layers": layers, "conv1d_made_linear": converted}
