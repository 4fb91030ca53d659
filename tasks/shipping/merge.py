"""The ``merged`` form: an adapted model as one plain model of its base's architecture."""

from __future__ import annotations

import copy
from typing import Any

#: techniques whose trained model is already one plain model of the base's architecture (in-context
#: learning's is the base itself, read with its demonstrations)
PLAIN = frozenset({"none", "full", "head", "icl"})
#: techniques peft merges into the base's weights
MERGEABLE = frozenset({"lora", "ia3", "head_lora"})


def merged(model: Any, technique: str) -> Any:
    """A copy of ``model`` with its adapter folded into the weights (``model`` is left as it was).

    LoRA and IA3 merge through peft. ``head_lora``'s head, where the base ties it to the input embedding,
    is untied first (a copy of its own): merged in place it would move the embedding too, which the
    unmerged model never did. ``full``, ``head`` and ``none`` are plain models already."""
    import torch

    found = copy.deepcopy(model)
    if technique == "head_lora":
        plain = found.get_base_model()
        head = plain.get_output_embeddings()
        layer = getattr(head, "base_layer", head)
        if layer.weight is plain.get_input_embeddings().weight:
            layer.weight = torch.nn.Parameter(layer.weight.detach().clone(), requires_grad=False)
            plain.config.tie_word_embeddings = False
    if technique in MERGEABLE:
        found = found.merge_and_unload()
    return found.eval()
