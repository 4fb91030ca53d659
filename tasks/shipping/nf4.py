"""The ``nf4`` form: a plain model loaded by bitsandbytes with 4-bit NormalFloat linear layers (QLoRA's
data type; transformers' ``BitsAndBytesConfig``), which needs bitsandbytes and a CUDA GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def missing() -> str | None:
    """Why ``nf4`` cannot run here (None: it can)."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return "nf4 needs bitsandbytes (`pip install bitsandbytes`), which is not installed"
    import torch

    if not torch.cuda.is_available():
        return "nf4 needs a CUDA GPU (bitsandbytes' 4-bit kernels)"
    return None


def nf4(plain: Any, work_dir: Path) -> tuple[Any, dict[str, Any]]:
    """``plain`` saved to ``work_dir`` and loaded back with its linear layers in NF4 (float32 compute)."""
    import bitsandbytes
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, BitsAndBytesConfig

    source = work_dir / "nf4-source"
    plain.save_pretrained(source)
    settings = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
    )
    auto = AutoModelForSeq2SeqLM if plain.config.is_encoder_decoder else AutoModelForCausalLM
    model = auto.from_pretrained(
        source, quantization_config=settings, device_map={"": 0}, dtype=torch.float32
    )
    layers = sum(isinstance(m, bitsandbytes.nn.Linear4bit) for m in model.modules())
    return model.eval(), {"form": "nf4", "nf4_layers": layers}
