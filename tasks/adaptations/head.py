"""``head``: only the output head (or the last block) is trained — the cheapest white-box fine-tune.

With tied input/output embeddings (T5, OPT, BLOOM, GPT-2 tiny bases) the head *is* the embedding
matrix, so training it also changes the input embeddings; ``part="last_block"`` avoids that.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from ..infra.errors import PrivauditorError
from . import ADAPTATIONS
from ._base import Adaptation, freeze

PARTS = ("lm_head", "last_block")


@ADAPTATIONS.register("head")
@dataclass
class HeadOnlyAdaptation(Adaptation):
    """Freeze everything but the LM head (``part="lm_head"``) or the last block (``"last_block"``)."""

    part: str = "lm_head"  # what is trained: the output projection, or the last transformer block

    name = "head"
    starts_as_base = True
    default_lr = 1e-3
    default_epochs = 3

    def apply(self, model: Any, family: Any) -> Any:
        if self.part not in PARTS:
            raise PrivauditorError(f"head.part must be one of {', '.join(PARTS)}, got '{self.part}'")
        freeze(model)
        if self.part == "lm_head":
            trained = model.get_output_embeddings()
        else:
            trained = operator.attrgetter(family.modules.blocks)(model)[-1]
        for parameter in trained.parameters():
            parameter.requires_grad_(True)
        return model
