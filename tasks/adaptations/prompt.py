"""``prompt``: prompt tuning (Lester et al. 2021, https://arxiv.org/abs/2104.08691) via peft.

``virtual_tokens`` trainable input embeddings, initialised from the embeddings of a text (the paper's
best initialisation), are prepended to the input and sliced off before scoring. Never merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from . import ADAPTATIONS
from ._peft import PeftAdaptation, task_type


@ADAPTATIONS.register("prompt")
@dataclass
class PromptTuningAdaptation(PeftAdaptation):
    """Soft prompt of ``virtual_tokens`` embeddings, initialised from ``init_text``."""

    virtual_tokens: int = 8  # PrivAuditor's setting
    init_text: str = "Answer the request about the record below."  # initialisation text

    name = "prompt"
    paper = "https://arxiv.org/abs/2104.08691"
    prompt_learning = True
    # Lester et al. train T5 soft prompts at 0.3 with Adafactor, whose steps scale with the parameter's
    # size. AdamW's do not, and T5's embeddings (which initialise the prompt) are about 7x larger than the
    # causal bases' (RMS 1.0 vs 0.13-0.15 on the tiny bases), so T5 gets its own rate. Measured on the
    # members' training loss (tiny bases, finance, 5 epochs): causal bases fall 0.08-0.15 nats at 3e-2;
    # tiny-t5 falls 0.02 at 3e-2, 0.04 at 0.3 and 0.20 at 1.0.
    default_lr = 3e-2
    seq2seq_lr: ClassVar[float] = 1.0
    default_epochs = 5

    def default_lr_for(self, family: str) -> float:
        from ..models import FAMILIES

        return self.seq2seq_lr if FAMILIES.get(family).seq2seq else self.default_lr

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import PromptTuningConfig, PromptTuningInit

        tokenizer_path = getattr(model.config, "name_or_path", "") or getattr(model, "name_or_path", "")
        return PromptTuningConfig(
            num_virtual_tokens=self.virtual_tokens,
            prompt_tuning_init=PromptTuningInit.TEXT,
            prompt_tuning_init_text=self.init_text,
            tokenizer_name_or_path=tokenizer_path,
            task_type=task_type(family),
        )
