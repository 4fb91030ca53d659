"""A training run's step state, saved when a drain notice comes (:mod:`privauditor.tasks.infra.drain`) and
loaded by the next run of the same cell, which then trains on from that step to the model an
uninterrupted run gives, bit for bit (on the same machine and library versions).

The state (:func:`capture`) is everything the remaining steps read: the trainable weights, the optimizer's
and the scheduler's state, where the sampler is (the epoch, how many of its batches are done, and the
state the batch-order generators had before they drew the epoch's order, so the same order is drawn
again), every random generator training draws from (torch's global CPU and CUDA generators: dropout;
numpy's and Python's global ones; the loop's order generator, a sampler's own, a DP step's noise
generator and its gradient canaries' draws and scores), the loss record so far with the epoch's running sums, and the checkpoints already taken. It is
one ``torch.save`` file of tensors and plain values (read back with ``weights_only``), written to a
temporary name and renamed, in a resume folder (:class:`ResumeFolder`) that holds beside it the checkpoint
snapshots taken so far (hard links: a snapshot is never rewritten), so the audit after the resumed run
finds every one. The state names its cell and the hash of its spec: another spec's is ignored with a
warning.

The run stops with :class:`Preempted` (exit code 75, ``EX_TEMPFAIL``: try again), which a scheduler
retries like any failed cell.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..infra import drain
from ..infra.errors import PrivauditorError
from .snapshots import restore, trainable_state

log = logging.getLogger(__name__)

#: the state file's name in its resume folder, and the folder of the snapshots kept with it
STATE_FILE = "state.pt"
SNAPSHOTS = "snapshots"


class Preempted(PrivauditorError):
    """Training stopped at a step boundary after a drain notice, its state saved: rerun the cell to resume.

    A :class:`~privauditor.tasks.infra.errors.PrivauditorError` (as
    :class:`~privauditor.tasks.infra.deadline.CellTimeout` is) so the command line reports it in one line
    without a traceback, with an exit code of its own (75, ``EX_TEMPFAIL``) that says "retry", not "bad
    input"; nothing catches the base class to give up on a cell, so a scheduler retries it as any failure."""

    exit_code = 75
    step: int = 0  # the step the state was saved after
    save_seconds: float = 0.0  # how long saving it took
    notice_to_saved: float | None = None  # seconds from the notice to the state on disk


@dataclass(frozen=True)
class ResumeFolder:
    """Where one cell's step state lives (``folder``, kept when a retried cell starts again,
    :meth:`~privauditor.tasks.infra.results.CellFolder.start`), the ``key`` it must carry (the cell id and
    its spec's hash) and the folder the run writes its checkpoint snapshots to (``snapshots``)."""

    folder: Path
    key: dict[str, str]
    snapshots: Path

    @property
    def file(self) -> Path:
        return self.folder / STATE_FILE

    def load(self) -> dict[str, Any] | None:
        """The saved state with its snapshots put back in place; None where there is none, or where it is
        another spec's or unreadable (a warning; the folder is then cleared)."""
        if not self.file.exists():
            return None
        try:
            state: dict[str, Any] = torch.load(self.file, map_location="cpu", weights_only=True)
        except Exception as exc:  # a torn or foreign file: start from scratch
            log.warning("ignoring unreadable resume state %s (%s)", self.file, type(exc).__name__)
            self.clear()
            return None
        if state.get("key") != self.key:
            log.warning(
                "ignoring the resume state of another spec in %s (it names %s, this cell is %s)",
                self.folder, state.get("key"), self.key,
            )  # fmt: skip
            self.clear()
            return None
        _link_all(self.folder / SNAPSHOTS, self.snapshots)
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Keep the snapshots taken so far, then write ``state`` (with the key) atomically."""
        _link_all(self.snapshots, self.folder / SNAPSHOTS)
        tmp = self.file.with_suffix(".tmp")
        torch.save(state | {"key": self.key}, tmp)
        os.replace(tmp, self.file)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _link_all(source: Path, target: Path) -> None:
    """Every snapshot file of ``source`` also in ``target`` (a hard link, a copy where links fail)."""
    if not source.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.safetensors")):
        into = target / path.name
        if into.exists():
            into.unlink()
        try:
            os.link(path, into)
        except OSError:
            shutil.copy2(path, into)


def capture(model: Any, step: Any, generators: dict[str, torch.Generator | None]) -> dict[str, Any]:
    """The weights, optimizer, scheduler and every random generator's state now (``generators``: those the
    loop and its step own, by name; None for one a run does not have)."""
    state: dict[str, Any] = {
        "weights": trainable_state(model),
        "optimizer": step.optimizer.state_dict(),
        "scheduler": step.scheduler.state_dict(),
        "micro_batch": getattr(step, "micro_batch", None),
        "canaries": canaries.state() if (canaries := getattr(step, "canaries", None)) else None,
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": _numpy_state(),
        "python": _python_state(),
        "generators": {n: g.get_state() for n, g in generators.items() if g is not None},
    }
    return state


def put_back(
    state: dict[str, Any], model: Any, step: Any, generators: dict[str, torch.Generator | None]
) -> None:
    """Load what :func:`capture` saved into the model, the step and the generators."""
    restore(model, state["weights"], "the resume state")
    step.optimizer.load_state_dict(state["optimizer"])
    step.scheduler.load_state_dict(state["scheduler"])
    if hasattr(step, "micro_batch"):
        step.micro_batch = state["micro_batch"]
    if state.get("canaries") is not None:  # a DP step's gradient canaries: their scores and draws so far
        step.canaries.load(state["canaries"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np.random.set_state(
        (state["numpy"]["kind"], state["numpy"]["keys"].numpy().astype(np.uint32), state["numpy"]["pos"],
         state["numpy"]["has_gauss"], state["numpy"]["gauss"])
    )  # fmt: skip
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    for name, generator in generators.items():
        if generator is not None and name in state["generators"]:
            generator.set_state(state["generators"][name])


def _numpy_state() -> dict[str, Any]:
    legacy = np.random.get_state(legacy=True)
    assert isinstance(legacy, tuple), "numpy's legacy state is a tuple"
    kind, keys, pos, has_gauss, gauss = legacy
    return {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "gauss": float(gauss)}  # fmt: skip


def _python_state() -> tuple[int, list[int], float | None]:
    version, internal, gauss = random.getstate()
    return version, list(internal), gauss


@dataclass(kw_only=True)
class Position:
    """Where training is: the ``epoch``, how many of its batches are done (``index``), its running loss
    and token sums, and the order generators' states before its batches were drawn (``orders``)."""

    epoch: int
    index: int = 0
    loss: float = 0.0
    tokens: float = 0.0
    orders: dict[str, torch.Tensor] | None = None


@dataclass(kw_only=True)
class StepState:
    """A run's step state in its ``loop.resume`` folder: :meth:`load` at the start, and, called at each
    step boundary, saved after a drain notice before :class:`~privauditor.tasks.training.resume.Preempted`
    stops the run. ``order``: the loop's batch-order generator (a sampler's own is found on it)."""

    model: Any
    step: Any
    result: Any  # the run's TrainResult
    loop: Any  # the run's Loop
    order: torch.Generator
    seconds: float = 0.0  # training time of the earlier runs this one resumes
    begun: float = field(default_factory=time.perf_counter)

    def _orders(self) -> dict[str, torch.Generator]:
        found = {"order": self.order, "sampler": getattr(self.loop.sampler, "generator", None)}
        return {n: g for n, g in found.items() if isinstance(g, torch.Generator)}

    def _others(self) -> dict[str, torch.Generator | None]:
        """Generators the step draws from (DP-SGD's noise)."""
        return {"noise": getattr(getattr(self.step, "optimizer", None), "generator", None)}

    def orders(self, at: Position) -> None:
        """Record the order generators' states in ``at`` (a new epoch) or put back those it holds."""
        if at.orders is None:
            at.orders = {n: g.get_state() for n, g in self._orders().items()}
            return
        for name, generator in self._orders().items():
            generator.set_state(at.orders[name])

    def load(self) -> Position | None:
        """The position a saved state puts this run at (everything it holds loaded), None without one."""
        if self.loop.resume is None or self.loop.world > 1:
            return None
        state = self.loop.resume.load()
        if state is None:
            return None
        put_back(state, self.model, self.step, self._others())
        recorded = state["result"]
        self.result.loss_curve[:] = recorded["loss_curve"]
        self.result.epoch_losses[:] = recorded["epoch_losses"]
        self.result.checkpoints[:] = [tuple(c) for c in recorded["checkpoints"]]
        self.result.resumed_from_step = len(self.result.loss_curve)
        self.result.preemptions = state["preemptions"]
        self.seconds = state["seconds"]
        log.warning(
            "resuming training from step %d (its state saved at preemption %d)",
            self.result.resumed_from_step, self.result.preemptions,
        )  # fmt: skip
        return Position(**state["position"])

    def __call__(self, at: Position) -> None:
        """At a step boundary: after a drain notice, save the state and stop the run."""
        if not drain.requested():
            return
        saving = time.perf_counter()
        state = capture(self.model, self.step, self._others()) | {
            "position": vars(at).copy(),
            "result": {
                "loss_curve": list(self.result.loss_curve),
                "epoch_losses": list(self.result.epoch_losses),
                "checkpoints": list(self.result.checkpoints),
            },
            "preemptions": self.result.preemptions + 1,
            "seconds": self.seconds + saving - self.begun,
        }
        self.loop.resume.save(state)
        drain.settle()
        done = time.perf_counter()
        noticed = drain.noticed_at()
        error = Preempted(
            f"training stopped after step {len(self.result.loss_curve)} on a drain notice, its state saved in "
            f"{done - saving:.2f} s: rerun the cell to resume there"
        )
        error.step, error.save_seconds = len(self.result.loss_curve), done - saving
        error.notice_to_saved = None if noticed is None else time.monotonic() - noticed
        raise error
