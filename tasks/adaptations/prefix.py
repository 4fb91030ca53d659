"""``prefix``: prefix tuning (Li & Liang 2021, https://arxiv.org/abs/2101.00190) via peft.

Trainable key/value vectors are prepended at every layer through ``past_key_values``; no token is added
to the input, so scored positions are the text's own. Never merged into the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._peft import PeftAdaptation, task_type


@ADAPTATIONS.register("prefix")
@dataclass
class PrefixTuningAdaptation(PeftAdaptation):
    """Per-layer trainable prefixes of ``virtual_tokens`` key/value vectors."""

    virtual_tokens: int = 30  # PrivAuditor's setting
    projection: bool = False  # reparameterise through an MLP (the paper's trick for stability)

    name = "prefix"
    paper = "https://arxiv.org/abs/2101.00190"
    prompt_learning = True
    default_lr = 1e-2  # prompt-learning methods need far higher rates than weight updates
    default_epochs = 5

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import PrefixTuningConfig

        return PrefixTuningConfig(
            num_virtual_tokens=self.virtual_tokens,
            prefix_projection=self.projection,
            task_type=task_type(family),
        )
