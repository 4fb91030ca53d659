"""``lora``: low-rank adaptation (Hu et al. 2021, https://arxiv.org/abs/2106.09685) via peft.

Rank-r updates ``W + (alpha/r)·BA``. ``targets: all`` (the default) adapts every attention and MLP
projection, as QLoRA (Dettmers et al. 2023, https://arxiv.org/abs/2305.14314) found necessary to match
full fine-tuning; ``targets: qv`` adapts the query and value projections only, the LoRA paper's and
PrivAuditor's setting (``paper.yaml``). BLOOM and GPT-2 fuse q/k/v into one projection, adapted whole.

Offline defaults (r 16, lr 1e-2, 20 epochs) are sized for the tiny 2-layer bases: at the paper's q/v,
r 8, 3 epochs they learn the records' template but no record (tiny-llama × finance LOSS AUC 0.49–0.50,
measured), so an audit at defaults would measure nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..infra.errors import PrivauditorError
from . import ADAPTATIONS
from ._peft import PeftAdaptation, task_type

TARGETS = ("all", "qv")


def target_suffixes(family: Any, targets: str) -> list[str]:
    """Module-name suffixes of the family's projections: ``qv`` = query and value (the fused q/k/v
    projection where there is one), ``all`` = every attention and MLP projection."""
    m = family.modules
    if targets == "qv":
        return [m.qkv[0], m.qkv[2]] if len(m.qkv) == 3 else list(m.qkv)
    return [*m.qkv, *m.attn_out, *m.mlp_in, *m.mlp_out]


@ADAPTATIONS.register("lora")
@dataclass
class LoRAAdaptation(PeftAdaptation):
    """LoRA on every projection (``targets: qv`` for query/value only, ``target_modules`` for any)."""

    r: int = 16  # rank of the update
    alpha: int = 32  # scaling numerator: updates are scaled by alpha / r
    dropout: float = 0.05  # dropout on the LoRA input path
    targets: str = "all"  # all | qv
    target_modules: tuple[str, ...] | None = None  # explicit module-name suffixes; overrides `targets`

    name = "lora"
    starts_as_base = True
    paper = "https://arxiv.org/abs/2106.09685"
    # LLM-Adapters trains LoRA at 3e-4 for 3 epochs on 7B models (paper.yaml); see the module docstring.
    default_lr = 1e-2
    default_epochs = 20

    def __post_init__(self) -> None:
        if self.targets not in TARGETS:
            raise PrivauditorError(f"lora targets must be one of {', '.join(TARGETS)}, not {self.targets!r}")

    def peft_config(self, model: Any, family: Any) -> Any:
        from peft import LoraConfig

        targets = list(self.target_modules) if self.target_modules else target_suffixes(family, self.targets)
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=targets,
            fan_in_fan_out=family.transposed_linear,
            task_type=task_type(family),
        )
