"""Fault injection for crash-safety tests: stop a process dead at a named point of its work.

``PRIVAUDITOR_FAULT="PHASE[@CELL]:MARKER"`` makes the first process that reaches ``PHASE`` (of a cell
whose id contains ``CELL``, when given) write its pid to the file ``MARKER`` and wait there, so a test
can kill it (and the sweep) with SIGKILL at exactly that point. Phases: ``training``, ``scoring``,
``gradients``, ``neighbour generation`` (the cell's loops, through :func:`privauditor.tasks.infra.deadline.check`)
and ``leaderboard`` (between writing a leaderboard file and renaming it into place). Unset, it costs one
environment lookup.
"""

from __future__ import annotations

import os
import time

ENV = "PRIVAUDITOR_FAULT"
_cell: dict[str, str | None] = {"id": None}


def in_cell(cell_id: str | None) -> None:
    """Name the cell this process is working on (what ``@CELL`` matches)."""
    _cell["id"] = cell_id


def point(phase: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    where, _, marker = spec.partition(":")
    wanted, _, cell = where.partition("@")
    if phase != wanted or (cell and cell not in (_cell["id"] or "")):
        return
    tmp = f"{marker}.tmp-{os.getpid()}"
    with open(tmp, "w") as handle:
        handle.write(str(os.getpid()))
    try:  # only the first process to get here stops; the marker appears at once, with its pid in it
        os.link(tmp, marker)
    except FileExistsError:
        return
    finally:
        os.unlink(tmp)
    while True:  # until killed
        time.sleep(0.5)
