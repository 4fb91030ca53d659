"""``lora``: low-rank adaptation (Hu et al. 2021, https://arxiv.org/abs/2106.09685) via peft.

Rank-r updates ``W + (alpha/r)·BA`` on the attention query and value projections, as in the LoRA
paper and PrivAuditor's LLM-Adapters setup (BLOOM and GPT-2 fuse q/k/v into one projection, which is
adapted whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._peft import PeftAdaptation, task_type


def query_value(family: Any) -> list[str]:
    """The family's query and value projections (its fused q/k/v projection where there is one)."""
    qkv = family.modules.qkv
    return [qkv[0], qkv[2]] if len(qkv) == 3 else list(qkv)


@ADAPTATIONS.register("lora")
@dataclass
class LoRAAdaptation(PeftAdaptation):
    """LoRA on the query/value projections (override with ``target_modules``)."""

    r: int = 8  # rank of the update (the paper's and PrivAuditor's default)
    alpha: int = 16  # scaling numerator: updates are scaled by alpha / r
    dropout: float = 0.05  # dropout on the LoRA input path
    target_modules: tuple[str, ...] | None = None  # module-name suffixes; None = query/value

    name = "lora"
    paper = "https://arxiv.org/abs/2106.09685"
    # LLM-Adapters trains LoRA at 3e-4 on 7B models; tiny bases need a larger step to move in a few epochs.
    default_lr = 3e-3
    default_epochs = 3

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import LoraConfig

        targets = list(self.target_modules) if self.target_modules else query_value(family)
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=targets,
            fan_in_fan_out=family.name == "gpt2",  # GPT-2's Conv1D stores weights transposed
            task_type=task_type(family),
        )
