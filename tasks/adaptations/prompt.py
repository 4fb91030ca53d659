"""``prompt``: prompt tuning (Lester et al. 2021, https://arxiv.org/abs/2104.08691) via peft.

``virtual_tokens`` trainable input embeddings, initialised from the embeddings of a text (the paper's
best initialisation), are prepended to the input and sliced off before scoring. Never merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    default_lr = 3e-2  # Lester et al. train soft prompts at 0.3 with Adafactor; 3e-2 with AdamW here
    default_epochs = 5

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
