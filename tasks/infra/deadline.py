"""``run.cell_timeout_s``: a per-cell time limit, checked between steps of the cell's loops.

The cell's own loops (training steps, scoring batches, per-sample gradients, neighbour generation) call
:func:`check`; past the limit it raises :class:`CellTimeout`, a one-line error naming the limit and the
phase, and the cell is left without ``DONE`` (a rerun starts it again). Cooperative, so a single
forward pass is never cut in half and no half-written file is left behind.

Example::

    with limit(600):
        run the cell's work   # check() inside its loops raises CellTimeout after 600 s
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import PrivauditorError
from .faults import point

_state: dict[str, float | None] = {"deadline": None, "seconds": None}


class CellTimeout(PrivauditorError):
    """The cell ran past ``run.cell_timeout_s``."""


@contextmanager
def limit(seconds: float | None) -> Iterator[None]:
    """Within the block, :func:`check` raises once ``seconds`` have passed (None: no limit)."""
    previous = dict(_state)
    _state.update(deadline=None if seconds is None else time.monotonic() + seconds, seconds=seconds)
    try:
        yield
    finally:
        _state.update(previous)


def remaining() -> float | None:
    """Seconds left before the limit (None: no limit)."""
    deadline = _state["deadline"]
    return None if deadline is None else deadline - time.monotonic()


def expired() -> bool:
    left = remaining()
    return left is not None and left < 0


def timeout(phase: str) -> CellTimeout:
    return CellTimeout(f"the cell ran past run.cell_timeout_s = {_state['seconds']:g} s (in {phase})")


def check(phase: str) -> None:
    point(phase)  # crash tests stop here (only when $PRIVAUDITOR_FAULT asks)
    if expired():
        raise timeout(phase)
