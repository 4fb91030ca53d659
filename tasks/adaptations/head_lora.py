"""``head_lora``: LoRA on the output layer alone (Hu et al. 2021, https://arxiv.org/abs/2106.09685) via peft.

``head`` trains the whole output projection: about 2 % of a 7-B model's parameters (LLaMA-7B: 32,000 x
4,096 of 6.7 B), but 36-50 % of a tiny base's, whose vocabulary (4,096) dwarfs its width (128), and with
tied input/output embeddings the input side trains too. ``head_lora`` asks the head-only question at a
large model's fraction: a rank-r update ``W + (alpha/r)·BA`` of the output layer only, the base weight
(and so the tied input embedding) frozen. At r 8 on a tiny base that is 8 x (128 + 4,096) = 33.8 k
parameters, 2.3-3.7 % of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._peft import PeftAdaptation, task_type


def output_layer_name(model: Any) -> str:
    """The module name of the model's output projection (``lm_head`` in every supported family)."""
    head = model.get_output_embeddings()
    return next(name for name, module in model.named_modules() if module is head)


@ADAPTATIONS.register("head_lora")
@dataclass
class HeadLoRAAdaptation(PeftAdaptation):
    """A rank-``r`` LoRA update of the output layer; nothing else trains."""

    r: int = 8  # rank of the update: about 2-4 % of a tiny base, as `head` is of a 7-B model
    alpha: int = 16  # scaling numerator: updates are scaled by alpha / r (LoRA's usual 2r)
    dropout: float = 0.05  # dropout on the LoRA input path, as `lora`

    name = "head_lora"
    starts_as_base = True
    paper = "https://arxiv.org/abs/2106.09685"
    default_lr = 1e-2  # lora's; tiny bases read theirs from _rates.py (benchmarks/learning_rates.py)
    default_epochs = 20

    def apply(self, model: Any, family: Any) -> Any:
        import warnings

        # On tied embeddings peft warns that the adapter leaves the tie (peft #2777: merging it would untie
        # the weights). That is the point here: the update is on the output side only, and it is never merged.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Model has `tie_word_embeddings=True`")
            return super().apply(model, family)

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=[output_layer_name(model)],
            fan_in_fan_out=False,  # every family's output layer is an nn.Linear
            task_type=task_type(family),
        )
