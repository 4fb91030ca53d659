"""Shared plumbing for the techniques that peft implements (LoRA, IA3, prompt learning, LLaMA-Adapter).

The saved adaptation is a standard peft adapter directory (``adapter_config.json`` +
``adapter_model.safetensors``), so it also loads with ``PeftModel.from_pretrained`` outside
privauditor, and ``privauditor audit --adapter DIR`` accepts directories saved by other tools.
Prompt-learning adapters stay unmerged: merging changes the model under attack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._base import Adaptation, freeze


def task_type(family: Any) -> str:
    """peft's task type for the family (module-name suffixes work as ``target_modules`` unchanged:
    peft matches ``name.endswith('.' + key)``)."""
    return "SEQ_2_SEQ_LM" if family.seq2seq else "CAUSAL_LM"


class PeftAdaptation(Adaptation):
    """An adaptation whose :meth:`peft_config` builds a peft config; peft does the rest."""

    def peft_config(self, model: Any, family: Any) -> Any:
        raise NotImplementedError

    def apply(self, model: Any, family: Any) -> Any:
        from peft import get_peft_model

        self.check_family(family.name)
        freeze(model)
        return get_peft_model(model, self.peft_config(model, family))

    def save(self, model: Any, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(out_dir), safe_serialization=True)
        self.save_config(out_dir)

    def load(self, base: Any, family: Any, in_dir: Path) -> Any:
        from peft import PeftModel

        self.check_family(family.name)
        return PeftModel.from_pretrained(base, str(in_dir), is_trainable=False).eval()
