"""The resolved cell: a typed, frozen spec (HELM's ``RunSpec`` is the model), hashed into the cell id.

:func:`resolve` fills in every default of a :class:`~privauditor.tasks.spec.config.CellConfig` (the
technique's own learning rate and epochs and hyper-parameters, every attack's and view's) and pins what
the numbers depend on besides the settings, so the cell id changes exactly when the results would:

- ``train.precision``: ``fp32`` or ``bf16-mixed`` (``auto`` resolved by the weights' loaded dtype, so the
  same settings give the same id on any machine); an ``fp32`` cell's id leaves the key out, as it was;
- ``data``: the dataset's content (the sha256 of its rendered records; a hub dataset, whose content
  is not at hand, by id and revision), and ``split_version`` (how parts are drawn);
- ``base`` / ``reference_weights``: the weights' identity (the sha256 of an offline or local checkpoint's
  weight bytes: another pre-training profile, or another machine's kernels, give other bytes; a hub
  checkpoint's revision);
- the ``version`` of the technique, the training loop, every attack and every view it reads (bumped in
  their files whenever a change alters numbers), and the identity of any auxiliary model a view uses;
  with ``score.pii_candidates``, PII inference's (``pii_inference_version``: tasks/leakage/pii.py); with
  ``score.shipped``, the shipped forms' (``shipping_version``: tasks/shipping).

``cell.json`` records :meth:`CellSpec.to_dict` as ``config``; :meth:`CellSpec.from_dict` reads it back.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..infra.cache import stable_hash
from ..infra.errors import PrivauditorError
from .sections import DeepSpeedSettings, ScoreSettings, SplitConfig, TrainSettings, whole

if TYPE_CHECKING:
    from ..adaptations import Adaptation
    from ..attacks import Attack
    from ..defences import Defence

UNKNOWN_HASH = "????????"  # what validate shows for a cell whose offline base is not built yet
#: where a spec keeps the plugin objects it built, beside its fields (:meth:`CellSpec.technique`)
_PLUGINS = "_plugins"
_T = TypeVar("_T")


class Settings(Protocol):
    """What :func:`resolve` reads of a cell's settings as written: a
    :class:`~privauditor.tasks.spec.config.CellConfig` (named here by what it holds, so that the spec, below the
    settings, never imports them)."""

    model: str
    adaptation: str
    dataset: str
    seed: int
    split: SplitConfig
    train: TrainSettings
    score: ScoreSettings
    adaptation_params: dict[str, dict[str, Any] | None]
    reference: str | None
    defence: str
    defence_params: dict[str, dict[str, Any] | None]

    def built_attacks(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ViewSpec:
    """One input an attack reads: the view plugin, its version, parameters and auxiliary models."""

    name: str
    version: int
    params: dict[str, Any]
    identity: dict[str, str | None]


@dataclass(frozen=True)
class AttackSpec:
    """One attack: its version, every hyper-parameter, and the views it reads by role."""

    name: str
    version: int
    params: dict[str, Any]
    views: dict[str, ViewSpec]

    def plugin(self) -> Attack:
        """The attack object of this name and these parameters: built once per process, as a sweep's
        cells ask for the same ones (it only tells what the attack reads; a job that scores builds its
        own, :mod:`~privauditor.tasks.cell.attack_job`)."""
        return _attack(self.name, json.dumps(self.params, sort_keys=True))


@functools.cache
def _attack(name: str, params: str) -> Attack:
    """An attack, built once per (name, parameters as JSON)."""
    from ..attacks import build_attack

    return build_attack(name, json.loads(params))


@dataclass(frozen=True)
class TrainSpec:
    """Training as it will run: the technique's defaults filled in."""

    epochs: int
    #: epochs audited (fractions of an epoch allowed), ascending, the last = epochs; (0,) for ``none``
    checkpoints: tuple[float, ...]
    lr: float
    batch_size: int
    max_length: int
    workers: int  # 1 for a technique that trains nothing
    deepspeed: DeepSpeedSettings | None  # None: one process, the plain training loop
    version: int  # the training loop's
    #: ``fp32`` or ``bf16-mixed`` (tasks/infra/precision.py); the ids of ``fp32`` cells leave it out
    precision: str = "fp32"
    #: recompute each layer's activations in the backward (``tasks/training/checkpointing.py``); the ids
    #: of cells without it leave it out
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        # whole epochs as ints however they were read (a cell.json's 20 comes back as 20.0), so the id
        # hashes the same spec the same way
        object.__setattr__(self, "checkpoints", tuple(whole(c) for c in self.checkpoints))


@dataclass(frozen=True)
class CellSpec:
    """Everything a cell's numbers depend on; :meth:`cell_id` hashes it.

    :meth:`technique` and :meth:`defence_plugin` are the cell's plugin objects, built once per spec and
    kept beside the fields: the id, :meth:`to_dict`, equality and a pickled copy (another process builds
    its own) never see them."""

    model: str
    adaptation: str
    dataset: str
    seed: int
    base: str | None  # the base's weights identity (None: an offline base not built yet)
    data: str  # the dataset's identity
    split: SplitConfig
    split_version: int
    train: TrainSpec
    score: ScoreSettings
    adaptation_params: dict[str, Any]
    adaptation_version: int
    attacks: tuple[AttackSpec, ...]
    reference: str | None  # the reference model's name (None: the un-adapted base)
    reference_weights: str | None
    defence: str = "none"
    defence_params: dict[str, Any] = dataclasses.field(default_factory=dict)  # resolved: δ filled in
    pii_inference_version: int | None = (
        None  # tasks/leakage/pii.py's INFERENCE_VERSION with score.pii_candidates
    )
    shipping_version: int | None = None  # tasks/shipping's VERSION with score.shipped

    @property
    def complete(self) -> bool:
        """Every weights identity is known (offline models built), so the cell id is final."""
        identities = [self.base] + ([self.reference_weights] if self.reference else [])
        identities += [v for a in self.attacks for view in a.views.values() for v in view.identity.values()]
        return all(i is not None for i in identities)

    def cell_id(self) -> str:
        """``<model>__<adaptation>__<dataset>__s<seed>__<8 hex of this spec's hash>``."""
        model, dataset = label(self.model), label(self.dataset)
        parts = [slug(model), self.adaptation + self.defence_tag, slug(dataset), f"s{self.seed}"]
        # a local path enters as its own name: the content hashes (base, data) identify what it holds
        named = self.to_dict() | {"model": model, "dataset": dataset}
        return "__".join([*parts, stable_hash(named, 8) if self.complete else UNKNOWN_HASH])

    @property
    def defence_tag(self) -> str:
        """What the cell id adds to the technique: nothing without a defence, else the defence's tag
        (``+dp-e<ε>`` with DP-SGD)."""
        defence = self.defence_plugin()
        return "" if defence is None else defence.tag(self.defence_params)

    def technique(self) -> Adaptation:
        """The adaptation object of ``adaptation`` with its resolved hyper-parameters (built once)."""
        from ..adaptations import build_adaptation

        return self._built("technique", lambda: build_adaptation(self.adaptation, self.adaptation_params))

    def defence_plugin(self) -> Defence | None:
        """The defence object of ``defence`` (None for ``none``; built once)."""
        from ..defences import get_defence

        return self._built("defence", lambda: get_defence(self.defence))

    def _built(self, key: str, make: Callable[[], _T]) -> _T:
        """The plugin object under ``key``, made on first use and kept outside the dataclass fields."""
        plugins = self.__dict__.setdefault(_PLUGINS, {})
        if key not in plugins:
            plugins[key] = make()
        found: _T = plugins[key]
        return found

    def __getstate__(self) -> dict[str, Any]:
        """The fields alone: a copy, or the spec in another process, builds its own plugin objects."""
        return {k: v for k, v in self.__dict__.items() if k != _PLUGINS}

    def attack(self, name: str) -> AttackSpec:
        return next(a for a in self.attacks if a.name == name)

    def to_dict(self) -> dict[str, Any]:
        found = dataclasses.asdict(self)
        # settings added later, unset, leave the ids as they were
        for block, key in (("split", "canaries"), ("score", "pii_candidates"), ("score", "shipped")):
            if found[block].get(key) in (None, ()):
                del found[block][key]
        if found["train"]["precision"] == "fp32":
            del found["train"]["precision"]
        if found["train"].get("gradient_checkpointing") is False:
            del found["train"]["gradient_checkpointing"]
        for key in ("pii_inference_version", "shipping_version"):
            if found[key] is None:
                del found[key]
        return found

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellSpec:
        """A spec from its :meth:`to_dict` (a ``cell.json``'s ``config``)."""
        from ..infra.strict import build

        return build(cls, data, "cell.json config")


def spec_of(record: Mapping[str, Any]) -> CellSpec:
    """The spec of a finished cell's or audit's ``cell.json``. An audit draws no split and records none (its
    two files are in its ``audit`` section); its spec reads with the default split, which nothing about
    an audit reads."""
    from ..data.splits import SPLIT_VERSION

    config = record["config"]
    if "audit" in record and "split" not in config:
        config = config | {"split": dataclasses.asdict(SplitConfig()), "split_version": SPLIT_VERSION}
    return CellSpec.from_dict(config)


def label(name: str) -> str:
    """What an id calls a model or dataset: its name, or a local file's or folder's own name (a path says
    where the file was on one machine, not what it holds). A registered name or a hub id is itself."""
    from pathlib import PurePath

    from ..datasets._sources import FILE_SUFFIXES

    if name.startswith((".", "/", "~")) or PurePath(name).suffix.lower() in FILE_SUFFIXES:
        return PurePath(name).name or name
    return name


def slug(name: str) -> str:
    """A file-name-safe form of a model or dataset name ("/" becomes "--")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-") or "x"


def resolve(config: Settings, build: bool = True, data: str | None = None) -> CellSpec:
    """The :class:`CellSpec` of ``config`` (see the module docstring); ``build=False`` leaves offline
    models that are not built yet unidentified instead of pre-training them. ``data``: the records'
    identity when the caller has read them itself (an audit's two files), instead of the dataset's."""
    from ..adaptations import build_adaptation
    from ..data.splits import SPLIT_VERSION
    from ..datasets import dataset_identity
    from ..leakage.pii import INFERENCE_VERSION
    from ..models import resolve_model, weights_identity
    from ..shipping import VERSION as SHIPPING_VERSION

    # the settings' technique: the defaults it fills in make the spec, which then builds its own
    technique = build_adaptation(config.adaptation, config.adaptation_params.get(config.adaptation))
    model = resolve_model(config.model)
    data = data or dataset_identity(config.dataset)  # a wrong dataset fails here, before any pre-training
    train = _train_spec(config.train, technique, model, config.defence)
    defence_params = _defence_params(config, technique, train)
    attacks = _attack_specs(config, train, technique.trains, build)
    return CellSpec(
        model=config.model,
        adaptation=config.adaptation,
        dataset=config.dataset,
        seed=config.seed,
        base=weights_identity(model, build),
        data=data,
        split=config.split,
        split_version=SPLIT_VERSION,
        train=train,
        score=config.score,
        adaptation_params=technique.hyperparameters(),
        adaptation_version=technique.version,
        attacks=attacks,
        reference=config.reference,
        reference_weights=None if config.reference is None else weights_identity(config.reference, build),
        defence=config.defence,
        defence_params=defence_params,
        pii_inference_version=None if config.score.pii_candidates is None else INFERENCE_VERSION,
        shipping_version=SHIPPING_VERSION if config.score.shipped else None,
    )


def _train_spec(train: TrainSettings, technique: Adaptation, model: Any, defence: str = "none") -> TrainSpec:
    """Training as the base ``model`` will run it: the technique's epochs and rate where ``train`` leaves
    them out (the rate chosen for the registered base it is, under ``defence`` where one was), the base's
    ZeRO stage, the precision its weights imply."""
    from ..infra.precision import resolve_precision
    from ..training.loop import TRAINER_VERSION

    trains = technique.trains
    deepspeed = train.deepspeed
    if deepspeed is None and trains:
        stage = model.resources.zero_stage or (2 if train.workers > 1 else None)
        deepspeed = None if stage is None else DeepSpeedSettings(stage)
    epochs, checkpoints, lr = _schedule(train, technique, model.registered, model.family, defence)
    return TrainSpec(
        epochs=epochs,
        checkpoints=checkpoints,
        lr=lr,
        batch_size=train.batch_size,
        max_length=train.max_length,
        workers=train.workers if trains else 1,
        deepspeed=deepspeed if trains else None,
        version=TRAINER_VERSION,
        precision=resolve_precision(precision_setting(train), model.dtype),
        gradient_checkpointing=train.gradient_checkpointing and trains,
    )


def _schedule(
    train: TrainSettings, technique: Adaptation, name: str, family: str, defence: str = "none"
) -> tuple[int, tuple[float, ...], float]:
    """(epochs, checkpoints, learning rate): the technique's defaults where ``train`` leaves them out; the
    base itself at one checkpoint for a technique that trains nothing, whatever the training settings."""
    if not technique.trains:
        return 0, (0,), 0.0
    written = int(train.checkpoints[-1]) if train.checkpoints else train.epochs
    epochs = technique.default_epochs if written is None else written
    lr = technique.default_lr_on(name, family, defence) if train.lr is None else train.lr
    return epochs, tuple(train.checkpoints or (epochs,)), lr


def _defence_params(config: Settings, technique: Adaptation, train: TrainSpec) -> dict[str, Any]:
    """The defence's parameters resolved ({} without one); a pair it cannot train is a one-line error."""
    from ..defences import get_defence

    defence = get_defence(config.defence)
    if defence is None:
        return {}
    reason = defence.unsupported_reason(technique, train.workers, train.deepspeed)
    if reason:
        raise PrivauditorError(f"cannot run {config.model} × {config.adaptation}: {reason}")
    trained = config.split.members + config.split.known_members
    return defence.resolve(config.defence_params.get(config.defence), trained)


def _attack_specs(config: Settings, train: TrainSpec, trains: bool, build: bool) -> tuple[AttackSpec, ...]:
    """Every attack with its views' identities (``build``: pre-training offline models they read); an
    attack of a trajectory on fewer than 2 checkpoints is a one-line error."""
    attacks = []
    for name, attack in config.built_attacks().items():
        if attack.access == "checkpoints" and trains and len(train.checkpoints) < 2:
            raise PrivauditorError(
                f"attack '{name}' reads a training trajectory: train.checkpoints needs at least 2 "
                f"checkpoints, not {list(train.checkpoints)}"
            )
        views = {
            role: ViewSpec(
                name=view.name,
                version=view.version,
                params=view.hyperparameters(),
                identity=view.identity(build),
            )
            for role, view in attack.views().items()
        }
        attacks.append(
            AttackSpec(name=name, version=attack.version, params=attack.hyperparameters(), views=views)
        )
    return tuple(attacks)


def precision_setting(train: Any) -> str:
    """``train.precision`` as written; under ``auto``, an explicit ``train.deepspeed.bf16`` decides."""
    bf16 = None if train.deepspeed is None else train.deepspeed.bf16
    if train.precision != "auto" or bf16 is None:
        return train.precision
    return "bf16-mixed" if bf16 else "fp32"


def setting_of(spec: dict[str, Any]) -> str:
    """The hash of a resolved spec (``CellSpec.to_dict()``) without its seed: what cells of different
    seeds share."""
    return stable_hash({k: v for k, v in spec.items() if k != "seed"}, 16)


def technique_of(cell_id: str, adaptation: str) -> str:
    """The technique as a cell id names it: the adaptation with its defence's tag (``full+dp-e1``). An
    audit's id (``audit__<model>__<adapter>__<hash>``) names none: the audit's adaptation."""
    parts = cell_id.split("__")
    return adaptation if parts[0] == "audit" else parts[1]
