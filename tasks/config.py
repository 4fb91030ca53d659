"""The settings of one cell as a user writes them, strict: every key known, every value the right type.

A cell's settings are the sweep-file blocks that shape one cell (``split``, ``train``, ``attacks``, ...)
plus its (model, adaptation, dataset, seed). :func:`cell_config` builds a frozen :class:`CellConfig`
from nested mappings, applying ``key.path=value`` overrides (``--set``) last; an unknown key or a value
of the wrong type is a one-line error (:mod:`privauditor.tasks.settings` checks every block).
:meth:`CellConfig.resolve` turns the settings into the typed :class:`~privauditor.tasks.spec.CellSpec`
the cell id hashes and ``cell.json`` records.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import PrivauditorError
from .settings import build, load_yaml

if TYPE_CHECKING:
    from .attacks import Attack
    from .spec import CellSpec

DEFAULT_ATTACKS = ("loss", "reference", "zlib", "neighbourhood", "min_k", "min_k_pp", "gradnorm")


def _at_least(section: str, owner: Any, minimum: dict[str, float]) -> None:
    for name, low in minimum.items():
        value = getattr(owner, name)
        if value is not None and value < low:
            raise PrivauditorError(f"{section}.{name} must be at least {low}, not {value!r}")


@dataclass(frozen=True)
class SplitConfig:
    """Sizes of the split's parts (see :mod:`privauditor.tasks.splits`)."""

    members: int = 100  # trained on and scored
    nonmembers: int = 100  # scored, never trained on
    validation: int = 100  # the utility figure only
    population: int = 0  # neither trained on nor scored: samples for attacks that compare with a population
    known_members: int = 0  # trained on, never scored: member prefixes for attacks that use them
    #: duplication: the fraction of members trained more than once, in equal groups, one per ``repeats``
    #: entry (how many times its members train); the other members train once
    repeated: float = 0.0
    repeats: int | tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        _at_least("split", self, {"members": 1, "nonmembers": 1, "validation": 1, "population": 0,
                                  "known_members": 0})  # fmt: skip
        repeats = (self.repeats,) if isinstance(self.repeats, int) else tuple(self.repeats)
        object.__setattr__(self, "repeats", repeats)
        if not 0 <= self.repeated <= 1:
            raise PrivauditorError(
                f"split.repeated is a fraction of the members, in [0, 1], not {self.repeated!r}"
            )
        if self.repeated > 0 and (not repeats or min(repeats) < 2):
            raise PrivauditorError(
                f"split.repeats must be counts of at least 2 (how often a repeated member trains), not {list(repeats)}"
            )


def whole(value: float) -> int | float:
    """An epoch count as written, an int where it is whole (``1.0`` -> ``1``), so ids do not change with
    how a whole number was written."""
    return int(value) if float(value).is_integer() else float(value)


def check_checkpoints(checkpoints: tuple[float, ...] | None, epochs: int | None) -> None:
    """``train.checkpoints``: epochs from 0 up (fractions of an epoch allowed, e.g. 0.25), strictly
    ascending, the last a whole number equal to ``train.epochs`` when both are set."""
    if checkpoints is None:
        return
    shown = list(checkpoints)
    if (
        not checkpoints
        or checkpoints[0] < 0
        or any(b <= a for a, b in zip(checkpoints, checkpoints[1:], strict=False))
    ):
        raise PrivauditorError(f"train.checkpoints must be epochs from 0 up in ascending order, not {shown}")
    if not float(checkpoints[-1]).is_integer():
        raise PrivauditorError(
            f"the last of train.checkpoints ({shown}) must be a whole number of epochs: it is train.epochs"
        )
    if epochs is not None and epochs != checkpoints[-1]:
        raise PrivauditorError(
            f"train.epochs ({epochs}) must be the last of train.checkpoints ({shown}): set one of them"
        )


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
    epochs: int | None = None  # None: the last checkpoint, else the technique's own default
    #: epochs after which the adaptation is snapshotted and audited (ascending, 0 = before the first step,
    #: fractions of an epoch allowed; the last = ``epochs``); None: one checkpoint, at ``epochs``
    checkpoints: tuple[float, ...] | None = None
    lr: float | None = None  # None: the technique's own default
    batch_size: int = 8  # the global batch (split across workers)
    max_length: int = 128
    workers: int = 1  # data-parallel training workers; > 1 trains under DeepSpeed in Ray Train
    deepspeed: DeepSpeedSettings | None = None  # None: the model spec's ZeRO stage, if it has one

    def __post_init__(self) -> None:
        _at_least("train", self, {"epochs": 0, "lr": 0, "batch_size": 1, "max_length": 2, "workers": 1})
        if self.checkpoints is not None:
            object.__setattr__(self, "checkpoints", tuple(whole(c) for c in self.checkpoints))
        check_checkpoints(self.checkpoints, self.epochs)
        if self.batch_size < self.workers:
            raise PrivauditorError(
                f"train.batch_size ({self.batch_size}) must be at least train.workers ({self.workers})"
            )


@dataclass(frozen=True)
class ScoreSettings:
    batch_size: int = 16  # texts per scoring forward pass
    bootstrap: int = 1000  # AUC bootstrap resamples

    def __post_init__(self) -> None:
        _at_least("score", self, {"batch_size": 1, "bootstrap": 10})


@dataclass(frozen=True)
class CellConfig:
    """One cell's settings as written (defaults not yet filled in)."""

    model: str
    adaptation: str
    dataset: str
    seed: int = 0
    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    split: SplitConfig = field(default_factory=SplitConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    score: ScoreSettings = field(default_factory=ScoreSettings)
    #: hyper-parameters by technique name, e.g. {lora: {r: 16}}; only the cell's own technique's apply
    adaptation_params: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: hyper-parameters by attack name, e.g. {neighbourhood: {k: 10}}
    attack_params: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: the reference model (None: the un-adapted base)
    reference: str | None = None
    #: ``none`` or ``dp`` (DP-SGD, :mod:`privauditor.tasks.dp`)
    defence: str = "none"
    #: settings by defence name, e.g. {dp: {epsilon: 1}}; only the cell's own defence's apply
    defence_params: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def built_attacks(self) -> dict[str, Attack]:
        """Every chosen attack, built with its hyper-parameters (unknown names and fields fail here)."""
        from .attacks import build_attack

        return {name: build_attack(name, self.attack_params.get(name)) for name in self.attacks}

    def check(self) -> None:
        """Every name and hyper-parameter resolves, and every split part an attack reads is not empty;
        no dataset, weights or Ray are touched."""
        from .adaptations import build_adaptation
        from .dp import check_defence, resolve_dp, unsupported_reason

        technique = build_adaptation(self.adaptation, self.adaptation_params.get(self.adaptation))
        check_defence(self.defence)
        if self.defence == "dp":
            resolve_dp(self.defence_params.get("dp"), self.split.members)
            reason = unsupported_reason(technique, self.train.workers, self.train.deepspeed)
            if reason:
                raise PrivauditorError(f"cannot run {self.model} × {self.adaptation}: {reason}")
        for name, attack in self.built_attacks().items():
            for role, view in attack.views().items():
                for part, least in view.needs().items():
                    if getattr(self.split, part) < least:
                        raise PrivauditorError(
                            f"attack '{name}' needs split.{part} > {least - 1} (its {role} view '{view.name}' "
                            f"reads that part): set split.{part}"
                        )

    def resolve(self, build: bool = True) -> CellSpec:
        """The typed, resolved spec (every default filled in, data and weights identified). With
        ``build=False`` an offline base that is not built yet is left unidentified, not pre-trained."""
        from .spec import resolve

        return resolve(self, build)

    def cell_id(self) -> str:
        return self.resolve().cell_id()


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``a.b=value`` → (["a", "b"], value parsed as YAML), e.g. ``attacks=[loss,zlib]``, ``train.lr=3e-4``."""
    import yaml

    if "=" not in text:
        raise PrivauditorError(f"--set expects key=value, not {text!r}")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise PrivauditorError(f"--set expects key=value, not {text!r}")
    try:
        value = load_yaml(raw) if raw.strip() else None
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
    data = copy.deepcopy(settings)
    for text in assignments:
        assign(data, *parse_assignment(text))
    config = build(CellConfig, data, "cell")
    config.check()
    return config
