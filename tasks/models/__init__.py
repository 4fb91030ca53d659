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

import difflib
import json
import logging
import os
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..infra.errors import PrivauditorError, UnknownNameError, one_line, unknown_name_message
from ._spec import (
    FAMILIES,
    MODELS,
    PROFILES,
    Family,
    ModelSpec,
    PretrainProfile,
    Resources,
    TinyArchitecture,
    active_profile,
)
from ._weights import checkpoint_identity

log = logging.getLogger(__name__)

__all__ = [
    "FAMILIES",
    "MODELS",
    "PROFILES",
    "Family",
    "LoadedModel",
    "ModelSpec",
    "PretrainProfile",
    "Resources",
    "TinyArchitecture",
    "active_profile",
    "checkpoint_identity",
    "checkpoint_path",
    "corpus_ready",
    "load_model",
    "masked_lm_config",
    "masked_lm_identity",
    "masked_lm_path",
    "pretrain_report",
    "resolve_model",
    "tiny_config",
    "weights_identity",
]

DTYPES = ("float32", "bfloat16", "float16")
#: an offline tiny base pre-trained from another seed: ``tiny-llama-s1`` (a new base: new weights)
SEEDED = re.compile(r"^(?P<base>tiny-[a-z0-9]+)-s(?P<seed>[0-9]{1,6})$")
#: how close (difflib ratio) a name must be to a registered one to be taken for its typo, not a hub id
NEAR_NAME = 0.8


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

    Local directories are identified from ``config.json`` without loading weights, a local ``.gguf`` file
    from its ``general.architecture``. Any other name is a Hugging Face id (``gpt2`` as well as
    ``org/name``), whose config comes from the hub or the local HF cache to learn its family; a name
    within a typo of a registered one (``tiny-lama``) is an error that suggests it.
    """
    if dtype is not None and dtype not in DTYPES:
        raise PrivauditorError(f"unknown dtype '{dtype}' (allowed: {', '.join(DTYPES)})")
    overrides: dict[str, Any] = {k: v for k, v in (("revision", revision), ("dtype", dtype)) if v is not None}
    if name in MODELS:
        return replace(MODELS.get(name), **overrides)
    seeded = SEEDED.match(name)
    if seeded and seeded["base"] in MODELS and MODELS.get(seeded["base"]).source == "tiny":
        if int(seeded["seed"]) == 0:
            raise PrivauditorError(f"model '{name}': pre-training seed 0 is '{seeded['base']}' itself")
        base = MODELS.get(seeded["base"])
        return replace(base, name=name, path=name, pretrain_seed=int(seeded["seed"]), **overrides)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":  # a llama.cpp file, converted once (_package.py)
        from ._package import gguf_family

        found = str(path.resolve())
        return ModelSpec(name=found, family=gguf_family(path), source="gguf", path=found, **overrides)
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
    if name.startswith((".", "/", "~")):
        raise PrivauditorError(f"model directory '{name}' does not exist")
    if "/" not in name and difflib.get_close_matches(name, MODELS.names(), n=1, cutoff=NEAR_NAME):
        raise UnknownNameError(  # a near miss of a registered name: a typo, not a Hugging Face id
            unknown_name_message("model", name, MODELS.names())
            + "; or give a Hugging Face id or a local directory"
        )
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name, revision=revision)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PrivauditorError(
            f"model '{name}' is not registered (privauditor ls models), not a local directory, and its "
            f"config cannot be loaded as a Hugging Face id: {first_line}"
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


def tiny_config(family_name: str, arch: TinyArchitecture | None = None, vocab_size: int | None = None) -> Any:
    """The transformers config of the offline base ``tiny-<family_name>`` (or of that family at ``arch``,
    with ``vocab_size`` entries): its architecture alone, nothing built or loaded."""
    from ._tiny import tiny_config as config_of
    from ._tokenizer import VOCAB_SIZE

    return config_of(family_name, arch, vocab_size or VOCAB_SIZE)


def masked_lm_config() -> Any:
    """The config of the offline masked LM that makes neighbour texts: its architecture alone."""
    from ._tiny import masked_lm_config as config_of

    return config_of()


def checkpoint_path(
    model: str | ModelSpec, build: bool = True, profile: PretrainProfile | None = None
) -> str | None:
    """Where the weights of a model are: an offline tiny base is pre-trained first if it is not cached
    (with ``build`` False, None instead), with ``profile`` or the active pre-training profile."""
    spec = model if isinstance(model, ModelSpec) else resolve_model(model)
    if spec.source == "package":
        from ._package import package_base_dir

        found = package_base_dir(spec.slug, spec.packaged, build=build)
        return None if found is None else str(found)
    if spec.source == "gguf":
        from ._package import gguf_base_dir

        found = gguf_base_dir(Path(spec.path), build=build)
        return None if found is None else str(found)
    if spec.source != "tiny":
        return spec.path
    from ._tiny import tiny_base_dir

    profile = profile or active_profile()
    if spec.pretrain_seed:  # the seed is part of the profile, so of the cache key: another base
        profile = replace(profile, seed=spec.pretrain_seed)
    found = _located(("base", spec.family), profile, lambda p: tiny_base_dir(spec.family, p, build=build))
    return None if found is None else str(found)


def masked_lm_path(build: bool = True, profile: PretrainProfile | None = None) -> Path | None:
    """The offline tiny masked LM that proposes neighbour texts (pre-trained first if it is not cached;
    with ``build`` False, None instead)."""
    from ._tiny import masked_lm_dir

    return _located(("masked_lm",), profile, lambda p: masked_lm_dir(p, build=build))


_FOUND: dict[tuple, Path] = {}


def _located(what: tuple, profile: PretrainProfile | None, look: Any) -> Path | None:
    """An offline artefact's cache folder, remembered once found (finding it reads the corpus and the
    tokenizer to rebuild its exact key: resolving a sweep's cells asks hundreds of times)."""
    from ..infra.cache import cache_root

    profile = profile or active_profile()
    key = (*what, profile, str(cache_root()))
    if key in _FOUND and (_FOUND[key] / "key.json").exists():
        return _FOUND[key]
    found = look(profile)
    if found is not None:
        _FOUND[key] = found
    return found


def corpus_ready() -> bool:
    """Whether the pre-training corpus and its tokenizer are in the artefact cache (nothing is built)."""
    from ._corpus import load_corpus
    from ._tokenizer import tokenizer_dir

    corpus = load_corpus(build=False)
    return corpus is not None and tokenizer_dir(corpus, build=False) is not None


def pretrain_report(path: str | Path) -> dict[str, Any]:
    """The ``pretrain.json`` of an offline tiny base or masked LM: held-out and unigram loss, timings."""
    return json.loads((Path(path) / "pretrain.json").read_text())


def weights_identity(model: str | ModelSpec, build: bool = True) -> str | None:
    """What a model's weights are, for cell ids: ``sha256:<hex>`` of an offline or local checkpoint's
    weight files (names and bytes), ``revision:<revision>`` of a Hugging Face checkpoint (``main`` unless
    one is pinned), ``sha256:<hex>@<package>==<version>`` of a packaged base's converted weights. None
    for an offline base that is not built when ``build`` is False. A process reads a checkpoint's bytes
    once (hashes are kept by file size and modification time)."""
    spec = model if isinstance(model, ModelSpec) else resolve_model(model)
    if spec.source == "hub":
        return f"revision:{spec.revision or 'main'}"
    path = checkpoint_path(spec, build)
    if path is None:
        return None
    if spec.source == "package":
        from ._package import packaged_identity

        return packaged_identity(Path(path), spec.packaged)
    return checkpoint_identity(Path(path))


def masked_lm_identity(build: bool = True) -> str | None:
    """:func:`weights_identity` of the offline masked LM that makes neighbour texts."""
    path = masked_lm_path(build)
    return None if path is None else checkpoint_identity(path)


TRUST_REMOTE_CODE_ENV = "PRIVAUDITOR_TRUST_REMOTE_CODE"


def trust_remote_code() -> bool:
    """A checkpoint never runs its own Python code unless the user sets ``PRIVAUDITOR_TRUST_REMOTE_CODE=1``
    (transformers' weights load from safetensors, or through ``torch.load(weights_only=True)``)."""
    return os.environ.get(TRUST_REMOTE_CODE_ENV, "") == "1"


def load_model(
    model: str | ModelSpec, device: str | None = None, precision: str | None = None
) -> LoadedModel:
    """Load tokenizer and weights for a model name or spec, in eval mode on ``device`` (default: the
    GPU when this process has one, as a Ray trial given a GPU does, else the CPU), stored in the loaded
    dtype, or as ``precision`` says (tasks/infra/precision.py: frozen weights bf16 under ``bf16-mixed``)."""
    import torch

    if not torch.cuda.is_available():  # accelerate imports DeepSpeed when installed, which then announces
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # its CPU fallback on every process's first load
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    spec = model if isinstance(model, ModelSpec) else resolve_model(model)
    family = FAMILIES.get(spec.family)
    path = checkpoint_path(spec)
    assert path is not None
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
    if precision is not None:
        from ..infra.precision import to_precision

        to_precision(weights, precision)
    weights.to(device).eval()
    return LoadedModel(spec=spec, family=family, tokenizer=tokenizer, model=weights, path=path)
