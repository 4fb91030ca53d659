"""The sections of a cell's settings that the resolved spec keeps as written: the split, training,
DeepSpeed and scoring settings, each a frozen dataclass that checks its own values (one-line errors).
:mod:`privauditor.tasks.spec.config` builds them from a user's blocks; :mod:`privauditor.tasks.spec.resolved` records
them in the typed spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..infra.errors import PrivauditorError
from ..leakage.canaries import CanarySettings


def _at_least(section: str, owner: Any, minimum: dict[str, float]) -> None:
    for name, low in minimum.items():
        value = getattr(owner, name)
        if value is not None and value < low:
            raise PrivauditorError(f"{section}.{name} must be at least {low}, not {value!r}")


@dataclass(frozen=True)
class SplitConfig:
    """Sizes of the split's parts (see :mod:`privauditor.tasks.data.splits`)."""

    members: int = 100  # trained on and scored
    nonmembers: int = 100  # scored, never trained on
    validation: int = 100  # the utility figure only
    population: int = 0  # neither trained on nor scored: samples for attacks that compare with a population
    known_members: int = 0  # trained on, never scored: member prefixes for attacks that use them
    #: duplication: the fraction of members trained more than once, in equal groups, one per ``repeats``
    #: entry (how many times its members train); the other members train once
    repeated: float = 0.0
    repeats: int | tuple[int, ...] = (1,)
    #: canaries of a fixed format, trained on and measured by their exposure (tasks/leakage/canaries.py); None in
    #: the default, whose cell ids leave the key out
    canaries: CanarySettings | None = None

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
    bf16: bool | None = None  # None: as train.precision says (bf16 under bf16-mixed), on every device

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
    #: ``fp32``, ``bf16-mixed`` or ``auto`` (by the weights' loaded dtype): tasks/infra/precision.py
    precision: str = "auto"
    #: recompute each layer's activations in the backward instead of keeping them (tasks/training/
    #: checkpointing.py): less memory, one more forward per step; False, the default, leaves the cell ids alone
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        from ..infra.precision import check_setting

        _at_least("train", self, {"epochs": 0, "lr": 0, "batch_size": 1, "max_length": 2, "workers": 1})
        check_setting(self.precision)
        bf16 = None if self.deepspeed is None else self.deepspeed.bf16
        if bf16 is not None and self.precision != "auto" and bf16 != (self.precision == "bf16-mixed"):
            raise PrivauditorError(
                f"train.deepspeed.bf16 ({bf16}) contradicts train.precision ({self.precision}): set one of them"
            )
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
    #: PII inference among this many candidates at the last checkpoint (tasks/leakage/pii.py ``inference``: one
    #: pass per candidate and field); None, the default, measures none and leaves the cell ids alone
    pii_candidates: int | None = None
    #: shipped forms audited beside the trained model at the last checkpoint (tasks/shipping: ``merged``,
    #: ``int8``, ``gguf-q8_0``, ``gguf-q4``, ``nf4``); empty, the default, leaves the cell ids alone
    shipped: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from ..shipping import check_forms

        _at_least("score", self, {"batch_size": 1, "bootstrap": 10, "pii_candidates": 2})
        object.__setattr__(self, "shipped", check_forms(tuple(self.shipped)))
