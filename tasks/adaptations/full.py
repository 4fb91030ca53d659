"""``full``: full fine-tuning — every parameter trained; the leakiest, most expensive baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._base import Adaptation


@ADAPTATIONS.register("full")
@dataclass
class FullFineTuningAdaptation(Adaptation):
    """All weights trainable; saved whole as safetensors (tied weights once)."""

    name = "full"
    starts_as_base = True
    # Tiny bases were pre-trained at 1e-2; a tenth of that adapts them within a few epochs without
    # wiping out pre-training. Billion-parameter models use ~1e-5 (set it in the sweep).
    default_lr = 1e-3
    default_epochs = 3

    def apply(self, model: Any, family: Any) -> Any:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        return model
