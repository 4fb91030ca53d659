"""``ptuning``: P-tuning (Liu et al. 2021, https://arxiv.org/abs/2103.10385) via peft.

Virtual token embeddings produced by a small MLP prompt encoder are prepended to the input; they are
sliced off before scoring. Never merged into the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._peft import PeftAdaptation, task_type


@ADAPTATIONS.register("ptuning")
@dataclass
class PTuningAdaptation(PeftAdaptation):
    """``virtual_tokens`` prompt embeddings from an MLP encoder of width ``encoder_hidden``."""

    virtual_tokens: int = 20  # PrivAuditor's setting
    encoder_hidden: int = 128  # PrivAuditor's setting

    name = "ptuning"
    paper = "https://arxiv.org/abs/2103.10385"
    prompt_learning = True
    default_lr = 1e-2
    default_epochs = 5

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import PromptEncoderConfig

        return PromptEncoderConfig(
            num_virtual_tokens=self.virtual_tokens,
            encoder_hidden_size=self.encoder_hidden,
            encoder_reparameterization_type="MLP",
            task_type=task_type(family),
        )
