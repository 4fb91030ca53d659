"""The ``int8`` form: a plain model's linear layers dynamically quantised to int8 (CPU)."""

from __future__ import annotations

import warnings
from typing import Any


def dynamic_int8(model: Any) -> tuple[Any, dict[str, Any]]:
    """``model`` (changed in place) with each ``nn.Linear`` an int8 dynamically quantised layer
    (torch.ao's ``quantize_dynamic``: int8 weights with a scale per tensor, activations quantised on the
    fly); GPT-2's ``Conv1D`` layers are first made the ``nn.Linear`` layers they compute. A head tied to
    the input embedding is quantised on its own: the embedding stays float."""
    import torch
    from transformers.pytorch_utils import Conv1D

    converted = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):  # y = x W + b with W (in, out): a Linear of weight Wᵀ
                linear = torch.nn.Linear(child.weight.shape[0], child.weight.shape[1])
                linear.weight.data.copy_(child.weight.data.T)
                linear.bias.data.copy_(child.bias.data)
                setattr(parent, name, linear)
                converted += 1
    with warnings.catch_warnings():  # torch.ao's dynamic quantisation is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        quantised = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    layers = sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in quantised.modules())
    return quantised.eval(), {"form": "int8", "int8_layers": layers, "conv1d_made_linear": converted}
