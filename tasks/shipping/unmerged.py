"""Techniques without a merge, shipped unmerged: the base's weights (every frozen parameter) in the
shipped form, the adapter's own parameters in float, as one would serve a prompt-tuned or adapter model
on a quantised base.

``int8`` quantises the frozen linear layers alone (:func:`~privauditor.tasks.shipping.int8.dynamic_int8`
with ``frozen_only``). The GGUF forms quantise each frozen weight in place with the ``gguf``
package's quantiser, by the rule :func:`~privauditor.tasks.shipping.gguf_file.write` applies to the file
(a 2-D weight whose rows, as the file lays them out, are whole blocks of 32; ``Conv1D`` matrices
transposed, as the file stores them), and dequantise it as the reader does: for a plain model this is the
file's round trip, tensor for tensor (``tests/test_shipping.py`` holds the two equal), without a file of
the base's architecture that the adapter could not live in.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .gguf_file import QUANT


def base_shipped(form: str, model: Any, family: str) -> tuple[Any, dict[str, Any]]:
    """A copy of the adapted ``model`` with its frozen base as ``form`` ships it, and what was done."""
    found = copy.deepcopy(model)
    if form == "int8":
        from .int8 import dynamic_int8

        model, record = dynamic_int8(found, frozen_only=True)
        return model, record | {"unmerged": True}
    return gguf_in_place(found, form)


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
