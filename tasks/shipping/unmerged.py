"""Techniques without a merge, shipped unmerged: the base's weights (every frozen parameter) in the
shipped form, the adapter's own parameters in float, as one would serve a prompt-tuned or adapter model
on a quantised base.

``int8`` quantises the frozen linear layers alone (torch.ao's ``quantize_dynamic`` by module name; GPT-2's
frozen ``Conv1D`` layers first made ``nn.Linear``); the swap keeps a layer's forward hooks, which is how the
bottleneck adapters attach. The GGUF forms quantise each frozen weight in place with the ``gguf``
package's quantiser, by the rule :func:`~privauditor.tasks.shipping.gguf_file.write` applies to the file
(a 2-D weight whose rows, as the file lays them out, are whole blocks of 32; ``Conv1D`` matrices
transposed, as the file stores them), and dequantise it as the reader does: for a plain model this is the
file's round trip, tensor for tensor (``tests/test_shipping.py`` holds the two equal), without a file of
the base's architecture that the adapter could not live in.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np

from .gguf_file import QUANT


def base_shipped(form: str, model: Any, family: str) -> tuple[Any, dict[str, Any]]:
    """A copy of the adapted ``model`` with its frozen base as ``form`` ships it, and what was done."""
    found = copy.deepcopy(model)
    if form == "int8":
        return frozen_int8(found)
    return gguf_in_place(found, form)


def frozen_int8(model: Any) -> tuple[Any, dict[str, Any]]:
    """``model`` (changed in place) with every frozen linear layer dynamically quantised to int8."""
    import torch
    from transformers.pytorch_utils import Conv1D

    converted = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Conv1D) and not child.weight.requires_grad:
                linear = torch.nn.Linear(child.weight.shape[0], child.weight.shape[1]).requires_grad_(False)
                linear.weight.data.copy_(child.weight.data.T)
                linear.bias.data.copy_(child.bias.data)
                for hooks in ("_forward_hooks", "_forward_pre_hooks"):  # how bottleneck adapters attach
                    getattr(linear, hooks).update(getattr(child, hooks))
                linear._modules.update(child._modules)  # an adapter registered under the layer
                setattr(parent, name, linear)
                converted += 1
    config = torch.ao.quantization.default_dynamic_qconfig
    # by name: a frozen layer quantised, a trainable one (an adapter's, even one registered under a frozen
    # layer, which would inherit its setting) explicitly not
    spec = {
        name: None if module.weight.requires_grad else config
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear
    }
    with warnings.catch_warnings():  # torch.ao's dynamic quantisation is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        quantised = torch.ao.quantization.quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)
    layers = sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in quantised.modules())
    return quantised.eval(), {
        "form": "int8", "int8_layers": layers, "conv1d_made_linear": converted, "unmerged": True,
    }  # fmt: skip


def gguf_in_place(model: Any, form: str) -> tuple[Any, dict[str, Any]]:
    """``model`` (changed in place) with each frozen weight quantised and dequantised as a GGUF file of
    ``form`` stores and reads it."""
    import gguf
    import torch
    from transformers.pytorch_utils import Conv1D

    qtype = gguf.GGMLQuantizationType[QUANT[form]]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    seen: set[int] = set()
    quantised, floats = 0, []
    for prefix, module in model.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            if id(parameter) in seen or parameter.requires_grad:
                continue
            seen.add(id(parameter))
            flipped = isinstance(module, Conv1D)
            array = parameter.detach().float().numpy()
            array = array.T if flipped else array
            if name != "weight" or array.ndim != 2 or array.shape[-1] % block:
                floats.append(f"{prefix}.{name}")
                continue
            back = gguf.quants.dequantize(gguf.quants.quantize(np.ascontiguousarray(array), qtype), qtype)
            back = back.T if flipped else back
            parameter.data.copy_(torch.from_numpy(np.ascontiguousarray(back)).to(parameter.dtype))
            quantised += 1
    return model.eval(), {
        "form": form, "quant": QUANT[form], "quantised_tensors": quantised, "float_tensors": floats,
        "unmerged": True,
    }  # fmt: skip
