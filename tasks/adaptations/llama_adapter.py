"""``llama_adapter``: LLaMA-Adapter (Zhang et al. 2023, https://arxiv.org/abs/2303.16199) via peft's
adaption prompt: learnable prompts in the top layers' attention, gated by zero-initialised factors.
peft implements it for the LLaMA architecture only, so other families are rejected at validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._peft import PeftAdaptation


@ADAPTATIONS.register("llama_adapter")
@dataclass
class LlamaAdapterAdaptation(PeftAdaptation):
    """Adaption prompts of ``adapter_len`` tokens in the top ``adapter_layers`` layers (None = all)."""

    adapter_len: int = 10  # the paper's prompt length
    adapter_layers: int | None = None  # the paper adapts the top 30 of 32 layers; None = every layer

    name = "llama_adapter"
    starts_as_base = True
    paper = "https://arxiv.org/abs/2303.16199"
    families = ("llama",)
    prompt_learning = True
    # The paper trains at 9e-3 on 7B; on tiny-llama (finance, 5 epochs) the loss fell 0.05 nats at 1e-2
    # and 0.16 at 3e-2.
    default_lr = 3e-2
    default_epochs = 5

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import AdaptionPromptConfig

        layers = self.adapter_layers or model.config.num_hidden_layers
        return AdaptionPromptConfig(
            adapter_len=self.adapter_len, adapter_layers=layers, task_type="CAUSAL_LM"
        )
