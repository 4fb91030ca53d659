"""The settings of one cell, strict: every key known, every value the right type.

A cell's settings are the sweep-file blocks that shape one cell (``split``, ``train``, ``attacks``, ...)
plus its (model, adaptation, dataset, seed). :func:`cell_config` builds a frozen :class:`CellConfig`
from nested mappings, applying ``key.path=value`` overrides (``--set``) last; an unknown key is a
one-line error with "did you mean". :meth:`CellConfig.resolved` fills in every default (the technique's
own learning rate and epochs, every hyper-parameter of the technique and the attacks), and the cell id
hashes that, so changing any setting makes a new cell and never reuses an old one.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from .cache import stable_hash
from .errors import PrivauditorError
from .registry import unknown_name_message

DEFAULT_ATTACKS = ("loss", "reference", "zlib", "neighbourhood", "min_k", "min_k_pp", "gradnorm")


#: where each settings class sits in a sweep file / ``--set`` key, for error messages
SECTIONS = {
    "SplitConfig": "split",
    "TrainSettings": "train",
    "ScoreSettings": "score",
    "DeepSpeedSettings": "train.deepspeed",
}


def _at_least(owner: Any, minimum: dict[str, float]) -> None:
    for name, low in minimum.items():
        value = getattr(owner, name)
        if value is not None and value < low:
            section = SECTIONS.get(type(owner).__name__, type(owner).__name__)
            raise PrivauditorError(f"{section}.{name} must be at least {low}, not {value!r}")


@dataclass(frozen=True)
class SplitConfig:
    members: int = 100
    nonmembers: int = 100
    validation: int = 100

    def __post_init__(self) -> None:
        _at_least(self, {"members": 1, "nonmembers": 1, "validation": 1})


@dataclass(frozen=True)
class DeepSpeedSettings:
    """DeepSpeed ZeRO for the adaptation step (it then runs in a Ray Train ``TorchTrainer``)."""

    stage: int = 2  # ZeRO stage 0-3: 2 shards optimizer states and gradients, 3 also the parameters
    offload: bool = False  # optimizer states (and, at stage 3, parameters) in CPU memory
    bf16: bool | None = None  # None: bf16 where the accelerator supports it (CUDA with bf16), else fp32

    def __post_init__(self) -> None:
        if self.stage not in (0, 1, 2, 3):
            raise PrivauditorError(f"train.deepspeed.stage must be 0, 1, 2 or 3, not {self.stage!r}")


@dataclass(frozen=True)
class TrainSettings:
    epochs: int | None = None  # None: the technique's own default
    lr: float | None = None  # None: the technique's own default
    batch_size: int = 8  # the global batch (split across workers)
    max_length: int = 128
    workers: int = 1  # data-parallel training workers; > 1 trains under DeepSpeed in Ray Train
    deepspeed: DeepSpeedSettings | None = None  # None: the model spec's ZeRO stage, if it has one

    def __post_init__(self) -> None:
        _at_least(self, {"epochs": 0, "lr": 0, "batch_size": 1, "max_length": 2, "workers": 1})
        if self.batch_size < self.workers:
            raise PrivauditorError(
                f"train.batch_size ({self.batch_size}) must be at least train.workers ({self.workers})"
            )


@dataclass(frozen=True)
class ScoreSettings:
    batch_size: int = 16  # texts per scoring forward pass
    bootstrap: int = 1000  # AUC bootstrap resamples

    def __post_init__(self) -> None:
        _at_least(self, {"batch_size": 1, "bootstrap": 10})


@dataclass(frozen=True)
class CellConfig:
    model: str
    adaptation: str
    dataset: str
    seed: int = 0
    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    split: SplitConfig = field(default_factory=SplitConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    score: ScoreSettings = field(default_factory=ScoreSettings)
    #: hyper-parameters by technique name, e.g. {lora: {r: 16}}; only the cell's own technique's apply
    adaptation_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: hyper-parameters by attack name, e.g. {neighbourhood: {k: 10}}
    attack_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the reference attack's model (None: the un-adapted base)
    reference: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"attacks": list(self.attacks)}

    def resolved(self) -> dict[str, Any]:
        """Every setting with every default filled in: what the cell id hashes and cell.json records."""
        from .adaptations import build_adaptation
        from .attacks import build_attack

        technique = build_adaptation(self.adaptation, self.adaptation_params.get(self.adaptation))
        data = self.to_dict()
        data["train"]["epochs"] = technique.default_epochs if self.train.epochs is None else self.train.epochs
        if self.train.lr is None:
            from .models import resolve_model

            data["train"]["lr"] = technique.default_lr_for(resolve_model(self.model).family)
        else:
            data["train"]["lr"] = self.train.lr
        data["train"]["deepspeed"] = self._deepspeed()
        if self.adaptation == "none":  # nothing is trained
            data["train"]["workers"] = 1
        data["adaptation_params"] = technique.hyperparameters()
        data["attack_params"] = {
            name: build_attack(name, self.attack_params.get(name)).__dict__ for name in self.attacks
        }
        return data

    def _deepspeed(self) -> dict[str, Any] | None:
        """The cell's DeepSpeed settings, else the model spec's ZeRO stage, else ZeRO-2 when several
        workers train, else None (one process, the plain training loop)."""
        if self.adaptation == "none":
            return None
        if self.train.deepspeed is not None:
            return dataclasses.asdict(self.train.deepspeed)
        from .models import resolve_model

        stage = resolve_model(self.model).resources.zero_stage
        if stage is None and self.train.workers > 1:
            stage = 2
        return None if stage is None else dataclasses.asdict(DeepSpeedSettings(stage))

    def cell_id(self) -> str:
        """``<model>__<adaptation>__<dataset>__s<seed>__<8 hex of the resolved spec>``. The scale-out
        settings are hashed only when they differ from one process without DeepSpeed, so cells from
        before those settings existed keep their ids."""
        resolved = self.resolved()
        train = resolved["train"]
        if train["workers"] == 1 and train["deepspeed"] is None:
            del train["workers"], train["deepspeed"]
        parts = [slug(self.model), self.adaptation, slug(self.dataset), f"s{self.seed}"]
        return "__".join([*parts, stable_hash(resolved, 8)])


def slug(name: str) -> str:
    """A file-name-safe form of a model or dataset name ("/" becomes "--")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-") or "x"


def _check_type(where: str, value: Any, annotation: str) -> Any:
    """``value`` if it fits the field's annotation (ints accepted for floats), else a one-line error."""
    optional = "None" in annotation
    if value is None:
        if optional:
            return None
        raise PrivauditorError(f"{where} must not be null")
    base = annotation.replace(" | None", "")
    checks = {
        "int": lambda v: type(v) is int,
        "float": lambda v: type(v) in (int, float),
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
    }
    if base in checks and not checks[base](value):
        raise PrivauditorError(f"{where} must be {base}{' or null' if optional else ''}, not {value!r}")
    if base == "float":
        return float(value)
    if base.startswith("tuple"):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise PrivauditorError(f"{where} must be a list of names, not {value!r}")
        return tuple(value)
    if base.startswith("dict"):
        if not isinstance(value, dict) or not all(isinstance(v, dict | type(None)) for v in value.values()):
            raise PrivauditorError(f"{where} must map names to mappings of settings, not {value!r}")
        return {k: dict(v or {}) for k, v in value.items()}
    return value


def build_dataclass(cls: type, data: Any, where: str) -> Any:
    """``cls`` from a mapping, recursively; unknown keys and wrong types are one-line errors."""
    if not isinstance(data, dict):
        raise PrivauditorError(f"{where} must be a mapping, not {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise PrivauditorError(unknown_name_message(f"key in {where}", str(key), list(fields)))
        annotation = str(fields[key].type)
        nested = {c.__name__: c for c in (SplitConfig, TrainSettings, ScoreSettings, DeepSpeedSettings)}
        inner = annotation.removesuffix(" | None")
        if inner in nested and (value is not None or inner == annotation):
            kwargs[key] = build_dataclass(nested[inner], value, f"{where}.{key}")
        elif inner in nested:
            kwargs[key] = None
        else:
            kwargs[key] = _check_type(f"{where}.{key}", value, annotation)
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise PrivauditorError(f"{where} needs {', '.join(missing)}")
    return cls(**kwargs)


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``a.b=value`` → (["a", "b"], value parsed as YAML), e.g. ``attacks=[loss,zlib]``."""
    import yaml

    if "=" not in text:
        raise PrivauditorError(f"--set expects key=value, not {text!r}")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise PrivauditorError(f"--set expects key=value, not {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as error:
        raise PrivauditorError(f"--set {key}: cannot parse {raw!r} ({error.problem})") from None
    return path, value


def assign(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``data[path[0]][path[1]]... = value``, creating mappings on the way."""
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise PrivauditorError(f"cannot set {'.'.join(path)}: {part} is not a mapping")
        node = child
    node[path[-1]] = value


def cell_config(settings: dict[str, Any], assignments: list[str] = ()) -> CellConfig:
    """A validated :class:`CellConfig` from nested settings plus ``key=value`` overrides (last wins)."""
    import copy

    data = copy.deepcopy(settings)
    for text in assignments:
        assign(data, *parse_assignment(text))
    config = build_dataclass(CellConfig, data, "cell")
    config.resolved()  # unknown technique / attack names and hyper-parameters fail here
    return config
