"""An audited model as it ships (``privauditor audit --shipped FORM``: ``tasks/shipping``)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from ..infra.errors import PrivauditorError
from ..shipping import ship


def shipped_model(loaded: Any, technique: str, form: str, precision: str) -> tuple[Any, dict[str, Any]]:
    """``loaded`` with its model as ``form`` ships it (``tasks/shipping``), and what was done."""
    if form == "int8" and precision != "fp32":
        raise PrivauditorError(
            f"--shipped int8 quantises float32 weights: not at train.precision {precision}"
        )
    if technique == "checkpoint":  # a whole checkpoint: a plain model already
        technique = "full"
    elif technique == "peft":  # an adapter saved by another tool: its peft type (lora, ia3, ...) says which
        technique = str(next(iter(loaded.model.peft_config.values())).peft_type).split(".")[-1].lower()
    with tempfile.TemporaryDirectory(prefix="privauditor-shipped-") as work:
        model, record = ship(form, loaded.model, technique, loaded.family.name, Path(work))  # file not kept
    return dataclasses.replace(loaded, model=model), record
