"""A model with an adapter on top, loaded from disk: a standard peft adapter or one a privauditor cell
saved. The audit loads the user's model so, and a view computed out of a cell's process (SPV-MIA's
reference, on a Ray worker) reloads the cell's checkpoint so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..infra.errors import PrivauditorError, one_line


def load_adapted(model: str | Any, adapter: str | None) -> tuple[Any, str, int]:
    """The loaded model with the adapter applied, the adapter's name, and its trainable-parameter count."""
    from ..adaptations import build_adaptation
    from ..models import load_model

    loaded = load_model(model)
    if adapter is None:
        return loaded, "checkpoint", 0
    path = Path(adapter)
    if not path.is_dir():
        raise PrivauditorError(f"adapter directory {adapter} does not exist")
    if (path / "adaptation.json").is_file():
        saved = json.loads((path / "adaptation.json").read_text())
        name = saved.pop("adaptation")
        technique = build_adaptation(name, saved)
    elif (path / "adapter_config.json").is_file():
        from ..adaptations._peft import PeftAdaptation

        technique, name = PeftAdaptation(), "peft"
    else:
        raise PrivauditorError(
            f"{adapter}: not an adapter directory (no adapter_config.json or adaptation.json)"
        )
    before = sum(p.numel() for p in loaded.model.parameters())
    try:
        adapted = technique.load(loaded.model, loaded.family, path)
    except MemoryError:
        raise
    except Exception as exc:  # corrupted weights, or an adapter saved for another base
        kind = "unreadable safetensors" if "safetensor" in repr(exc).lower() else "does not fit this base"
        raise PrivauditorError(
            f"adapter {adapter} {kind} (model {loaded.spec.name}): {one_line(exc)}"
        ) from None
    loaded.model = adapted.eval()
    added = sum(p.numel() for p in adapted.parameters()) - before
    return loaded, name, max(added, 0)


def virtual_tokens(model: Any) -> int:
    """Positions a loaded peft prompt-learning adapter puts in front of the input (0 for any other)."""
    configs = getattr(model, "peft_config", {}).values()
    return max([getattr(c, "num_virtual_tokens", 0) or 0 for c in configs if c.is_prompt_learning], default=0)
