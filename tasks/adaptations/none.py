"""``none``: no adaptation — the base model itself, the control row of every leaderboard.

Members and non-members are i.i.d. and the base never saw either, so every attack should score an
AUC near 0.5 here; a clear deviation means the split or an attack is broken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ADAPTATIONS
from ._base import Adaptation, freeze


@ADAPTATIONS.register("none")
@dataclass
class NoAdaptation(Adaptation):
    """Leaves the base untouched (nothing is trained or saved)."""

    name = "none"
    default_lr = 0.0
    default_epochs = 0
    trains = False

    def apply(self, model: Any, family: Any) -> Any:
        freeze(model)
        return model

    def save(self, model: Any, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.save_config(out_dir)

    def load(self, base: Any, family: Any, in_dir: Path) -> Any:
        return self.apply(base, family)
