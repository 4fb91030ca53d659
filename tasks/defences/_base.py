"""What a defence plugin is: settings, resolution, unsupported pairs, training hooks, record, tag, cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


def default_delta(units: int) -> float:
    """δ when none is set: min(1e-5, n^-1.1) for n privacy units, the distinct records the run trains on
    (members and known members; a record's extra copies and the canaries are not counted). δ must be well
    below 1/n: a mechanism that publishes one record in the clear at random is (0, 1/n)-DP. Also the δ of
    every empirical lower bound on ε in a cell without a defence."""
    return min(1e-5, max(1, units) ** -1.1)


@dataclass(frozen=True)
class TrainingRun:
    """What a defence's training hooks are built for: the trained records (repeats counted), the batch
    size, the epochs, the cell's seed, whether the model is an encoder-decoder, and each trained record's
    unit (a record and its copies share one; user-level DP samples and clips by unit)."""

    records: int
    batch_size: int
    epochs: int
    seed: int
    seq2seq: bool
    units: tuple[int, ...] = ()  # each trained record's privacy unit: its copies share one


@dataclass
class Guard:
    """A defence's hooks for one training run. ``loop``: fields of
    :class:`~privauditor.tasks.training.loop.Loop` it sets (``make_step``, ``sampler``); ``record(steps)``: the
    ``defence`` block of ``cell.json`` after that many steps (its ``name`` added); ``spent(step)``: the ε
    spent by a step (None for a defence that claims no ε): each checkpoint records it, and an attack
    whose empirical lower bound exceeds it is a violation. ``canaries()``: after training, the scores and
    coins of canaries the defence audits itself with (DP's gradient canaries), None without them."""

    loop: dict[str, Any] = field(default_factory=dict)
    record: Callable[[int], dict[str, Any]] = lambda steps: {}
    spent: Callable[[int], float] | None = None
    canaries: Callable[[], Any] = lambda: None


class Defence:
    """A training-time defence. Subclasses set ``name``, ``settings`` (the dataclass of
    ``defence_params.<name>``; checked like every other setting) and ``version`` (bump when a change alters
    what it trains: part of every defended cell's id), and implement :meth:`guard`."""

    name: ClassVar[str]
    settings: ClassVar[type]
    version: ClassVar[int] = 1
    #: the timing label of building the guard (``cell.json``'s timings, the planner's stage)
    stage: ClassVar[str] = "defence"

    def resolve(self, params: dict[str, Any] | None, trained: int) -> dict[str, Any]:
        """``defence_params.<name>`` with every default filled in (``trained``: records the run trains
        on, for defaults that depend on them), and the version: what the cell id hashes."""
        from ..infra.strict import build

        settings = build(self.settings, params, f"defence_params.{self.name}")
        return dataclasses.asdict(settings) | {"version": self.version}

    def unsupported_reason(self, technique: Any, workers: int, deepspeed: Any) -> str | None:
        """Why the defence cannot train ``technique`` this way (None: it can)."""
        return None

    def tag(self, resolved: dict[str, Any]) -> str:
        """What the cell id adds to the technique's name (``lora+<tag>``)."""
        return f"+{self.name}"

    def guard(self, resolved: dict[str, Any], run: TrainingRun) -> Guard:
        """The training hooks for ``run`` under the ``resolved`` settings."""
        raise NotImplementedError

    def delta(self, resolved: dict[str, Any]) -> float | None:
        """The δ at which attacks' empirical lower bounds on ε are computed (None: the default)."""
        return resolved.get("delta")

    def summary(self, record: dict[str, Any], checkpoint: dict[str, Any]) -> str:
        """One line for ``privauditor cell``'s output: the ``defence`` block of ``cell.json`` and the last
        checkpoint's record."""
        return f"defence {self.name}: {record}"

    def extra_memory(self, trainable: int, batch_size: int) -> int:
        """Bytes of training state the defence adds to a run of ``trainable`` parameters (the planner)."""
        return 0
