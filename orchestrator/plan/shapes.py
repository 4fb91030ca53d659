"""A model's architecture without its weights or the network, for the planner.

A registered checkpoint carries its config fields (``architecture``); an offline base is its family's tiny
config; a local directory has its ``config.json``; any other Hugging Face id needs ``--params``: a
``config.json`` path, or a size and family (``7B:llama``: that family's architecture at the usual
proportions, ``params ≈ 12 · layers · hidden²`` at 128 dimensions per layer and per head), unless the
local Hugging Face cache holds its config.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from privauditor.tasks.infra.errors import PrivauditorError

from .costs import Shape

SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMBT]?)$", re.IGNORECASE)
SCALE = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_size(text: str) -> float:
    """``7B``, ``350M``, ``1.5e9``-style sizes as a number of parameters."""
    found = SIZE.match(text.strip())
    try:
        size = float(found.group(1)) * SCALE[found.group(2).upper()] if found else float(text)
    except ValueError:
        size = math.nan
    if not (math.isfinite(size) and size >= 1):
        raise PrivauditorError(
            f"--params: '{text}' is not a size (a number of parameters >= 1, e.g. 7B, 350M)"
        )
    return size


@contextlib.contextmanager
def registered(assignments: list[str]) -> Iterator[None]:
    """``--params ID=7B:llama`` / ``--params ID=path/config.json``: ``ID`` registered with that architecture
    while the block runs, so a sweep naming it can be planned."""
    from privauditor.tasks.models import MODELS

    names: list[str] = []
    try:
        _register(assignments, names)  # those registered before a bad one are removed too
        yield
    finally:
        for name in names:
            MODELS.remove(name)
        for cached in (config_of, shape_of, _trainable):
            cached.cache_clear()


def _register(assignments: list[str], names: list[str]) -> None:
    from privauditor.tasks.models import FAMILIES, MODELS, ModelSpec, family_for_model_type

    for item in assignments:
        name, _, value = item.partition("=")
        if not name or not value:
            raise PrivauditorError(
                f"--params '{item}': give ID=SIZE:FAMILY (e.g. org/model=7B:llama) or ID=config.json"
            )
        path = Path(value).expanduser()
        if path.suffix == ".json" or path.is_file():
            if not path.is_file():
                raise PrivauditorError(f"--params {name}: config file '{value}' does not exist")
            try:
                architecture = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise PrivauditorError(
                    f"--params {name}: config file '{value}' is not JSON ({exc})"
                ) from None
            if not isinstance(architecture, dict):
                raise PrivauditorError(f"--params {name}: config file '{value}' must hold a JSON object")
            family = family_for_model_type(str(architecture.get("model_type", "")), f"--params {name}").name
        else:
            size, _, family = value.partition(":")
            if not family:
                raise PrivauditorError(f"--params {name}: give the family too, e.g. {name}={size}:llama")
            FAMILIES.get(family)  # a one-line error for an unknown family
            architecture = {"params": parse_size(size)}
        if name in names:
            raise PrivauditorError(f"--params {name} is given twice")
        if name in MODELS:
            raise PrivauditorError(f"--params {name}: a registered model already has its architecture")
        MODELS.add(
            name, ModelSpec(name=name, family=family, source="hub", path=name, architecture=architecture)
        )
        names.append(name)


@functools.cache
def config_of(name: str) -> Any:
    """The transformers config of model ``name``, without weights or the network."""
    from transformers import AutoConfig

    from privauditor.tasks.models import TinyArchitecture, resolve_model, tiny_config

    spec = resolve_model(name)
    if spec.source == "tiny":
        return tiny_config(spec.family)
    if spec.source == "local":
        return AutoConfig.from_pretrained(spec.path)
    architecture = dict(spec.architecture)
    if "params" in architecture:  # a size alone: the family's architecture at the usual proportions
        params = architecture["params"]
        hidden = max(128, round((params * 128 / 12) ** (1 / 3) / 128) * 128)
        layers = max(1, round(params / (12 * hidden * hidden)))
        arch = replace(TinyArchitecture(), hidden=hidden, layers=layers, heads=hidden // 128, ffn=4 * hidden,
                       max_positions=2048)  # fmt: skip
        return tiny_config(spec.family, arch, vocab_size=32000)
    if architecture:
        return AutoConfig.for_model(architecture.pop("model_type"), **architecture)
    try:
        return AutoConfig.from_pretrained(spec.path, revision=spec.revision, local_files_only=True)
    except Exception:
        raise PrivauditorError(
            f"model '{name}' is not registered and no config of it is at hand: give --params "
            f"{name}=SIZE:FAMILY (e.g. 7B:llama) or --params {name}=path/to/config.json"
        ) from None


@functools.cache
def shape_of(name: str) -> Shape:
    return Shape.from_config(config_of(name))


class Trainable(NamedTuple):
    params: int  # trainable parameters
    matmul: int  # trainable weights of matrix multiplications (their gradients cost FLOPs per token)
    body: bool  # something below the output layer trains or takes gradients: the backward runs through
    added: int = 0  # parameters the technique adds to the base's (an adapter's, a prefix's)


@functools.cache
def _trainable(name: str, adaptation: str, params: str) -> Trainable:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
    from transformers.pytorch_utils import Conv1D

    from privauditor.tasks.adaptations import build_adaptation
    from privauditor.tasks.models import FAMILIES, resolve_model

    technique = build_adaptation(adaptation, json.loads(params))
    family = FAMILIES.get(resolve_model(name).family)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft's calls of deprecated transformers names
        model = (AutoModelForSeq2SeqLM if family.seq2seq else AutoModelForCausalLM).from_config(
            config_of(name)
        )
        head = model.get_output_embeddings().weight
        base = sum(p.numel() for p in model.parameters())
        try:
            model = technique.apply(model, family)
        except Exception:  # a technique that needs the tokenizer (prompt tuning's text initialisation)
            if not technique.prompt_learning:
                raise
            virtual = technique.virtual_tokens * shape_of(name).hidden
            return Trainable(virtual, 0, True, virtual)
    trained = [p for p in model.parameters() if p.requires_grad]
    matmul = sum(m.weight.numel() for m in model.modules()
                 if isinstance(m, torch.nn.Linear | Conv1D) and m.weight.requires_grad)  # fmt: skip
    added = max(0, sum(p.numel() for p in model.parameters()) - base)
    return Trainable(sum(p.numel() for p in trained), matmul, any(p is not head for p in trained), added)


def trainable_params(name: str, technique: Any) -> Trainable:
    """What ``technique`` trains on model ``name``, counted on the meta device."""
    return _trainable(
        name, technique.name, json.dumps(technique.hyperparameters(), sort_keys=True, default=str)
    )
