"""Models: family plugins, registered checkpoints, offline tiny bases, and one loading path.

A model name resolves to a :class:`ModelSpec` — a registered name (``tiny-llama``,
``yahma/llama-7b-hf``), a local checkpoint directory, or any Hugging Face id — and
:func:`load_model` turns a spec into (tokenizer, model, family, causal or seq2seq). Tiny bases are
pre-trained on first use and cached; real checkpoints load through ``transformers`` exactly like a
local directory does.

Example::

    from privauditor.tasks.models import load_model
    loaded = load_model("tiny-llama")
    print(loaded.family.name, loaded.seq2seq, loaded.model.num_parameters())
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import PrivauditorError, UnknownNameError, one_line
from ..registry import unknown_name_message
from ._spec import FAMILIES, MODELS, Family, ModelSpec, Resources, TinyArchitecture

log = logging.getLogger(__name__)

__all__ = [
    "FAMILIES",
    "MODELS",
    "Family",
    "LoadedModel",
    "ModelSpec",
    "Resources",
    "TinyArchitecture",
    "load_model",
    "resolve_model",
]

DTYPES = ("float32", "bfloat16", "float16")


def family_for_model_type(model_type: str, where: str) -> Family:
    """The family whose ``model_types`` include a config's ``model_type``."""
    for _, family in FAMILIES.items():
        if model_type in family.model_types:
            return family
    known = sorted(t for _, f in FAMILIES.items() for t in f.model_types)
    raise PrivauditorError(
        f"{where}: model_type '{model_type}' belongs to no supported family (supported: {', '.join(known)})"
    )


def resolve_model(name: str, revision: str | None = None, dtype: str | None = None) -> ModelSpec:
    """The spec for a registered name, a local checkpoint directory, or a Hugging Face id.

    Local directories are identified from ``config.json`` without loading weights. An unregistered
    Hugging Face id needs its config from the hub (or the local HF cache) to learn its family.
    """
    if dtype is not None and dtype not in DTYPES:
        raise PrivauditorError(f"unknown dtype '{dtype}' (allowed: {', '.join(DTYPES)})")
    overrides: dict[str, Any] = {k: v for k, v in (("revision", revision), ("dtype", dtype)) if v is not None}
    if name in MODELS:
        return replace(MODELS.get(name), **overrides)
    path = Path(name).expanduser()
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            raise PrivauditorError(f"model directory '{name}' has no config.json")
        model_type = json.loads(config_file.read_text()).get("model_type", "")
        family = family_for_model_type(model_type, f"model directory '{name}'")
        return ModelSpec(
            name=str(path.resolve()),
            family=family.name,
            source="local",
            path=str(path.resolve()),
            **overrides,
        )
    if "/" not in name or name.startswith((".", "/", "~")):
        if name.startswith((".", "/", "~")):
            raise PrivauditorError(f"model directory '{name}' does not exist")
        raise UnknownNameError(
            unknown_name_message("model", name, MODELS.names())
            + "; or give a Hugging Face id or a local directory"
        )
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name, revision=revision)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PrivauditorError(
            f"model '{name}' is not registered and its config cannot be loaded: {first_line}"
        ) from None
    family = family_for_model_type(config.model_type, f"model '{name}'")
    return ModelSpec(name=name, family=family.name, source="hub", path=name, **overrides)


@dataclass
class LoadedModel:
    """A ready model: its spec, family, tokenizer and weights, and where the weights came from."""

    spec: ModelSpec
    family: Family
    tokenizer: Any
    model: Any
    path: str

    @property
    def seq2seq(self) -> bool:
        return self.family.seq2seq


def checkpoint_path(spec: ModelSpec) -> str:
    """Where the weights of ``spec`` are (building a tiny base first if it is not cached)."""
    if spec.source == "tiny":
        from ._tiny import tiny_base_dir

        return str(tiny_base_dir(spec.family))
    return spec.path


TRUST_REMOTE_CODE_ENV = "PRIVAUDITOR_TRUST_REMOTE_CODE"


def trust_remote_code() -> bool:
    """A checkpoint never runs its own Python code unless the user sets ``PRIVAUDITOR_TRUST_REMOTE_CODE=1``
    (transformers' weights load from safetensors, or through ``torch.load(weights_only=True)``)."""
    return os.environ.get(TRUST_REMOTE_CODE_ENV, "") == "1"


def load_model(model: str | ModelSpec, device: str | None = None) -> LoadedModel:
    """Load tokenizer and weights for a model name or spec, in eval mode on ``device`` (default: the
    GPU when this process has one, as a Ray trial given a GPU does, else the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    spec = model if isinstance(model, ModelSpec) else resolve_model(model)
    family = FAMILIES.get(spec.family)
    path = checkpoint_path(spec)
    auto = AutoModelForSeq2SeqLM if family.seq2seq else AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr is for one-line errors, not a bar per load
    # peft still calls transformers' old name; that notice is for the two libraries, not the user
    warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
    try:
        remote = trust_remote_code()
        tokenizer = AutoTokenizer.from_pretrained(path, revision=spec.revision, trust_remote_code=remote)
        weights = auto.from_pretrained(
            path, revision=spec.revision, dtype=getattr(torch, spec.dtype), trust_remote_code=remote
        )
    except MemoryError:
        raise
    except Exception as exc:  # a corrupted, truncated or foreign checkpoint: one line, not a traceback
        raise PrivauditorError(f"cannot load model '{spec.name}' from {path}: {one_line(exc)}") from None
    if tokenizer.pad_token_id is None:  # LLaMA / GPT-J / GPT-2 checkpoints ship without a pad token
        tokenizer.pad_token = tokenizer.eos_token
    weights.to(device).eval()
    return LoadedModel(spec=spec, family=family, tokenizer=tokenizer, model=weights, path=path)
