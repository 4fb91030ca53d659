"""A drain notice: the node this process runs on is about to go (a spot instance's preemption, a node
drain), so the cell's training should save its step state and stop at the next step boundary.

Cloud schedulers give the notice as SIGTERM some seconds before the kill (AWS spot: 120 s, GKE: 30 s).
:func:`install` turns SIGTERM into a flag and the time it came; the training loop reads
:func:`requested` between steps, saves what it needs to resume and raises
:class:`~privauditor.tasks.training.resume.Preempted` (the handler itself never exits: a step is never cut
in half and no file is left half-written). :func:`request` raises the same flag from any thread, so
whatever receives a notice some other way (an orchestrator, a Ray actor's main thread) can forward it.

Example::

    drain.install()           # in the main thread of the process that runs the cell
    ...
    if drain.requested():     # at a step boundary
        save the step state; raise Preempted(...)
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

_flag = threading.Event()
_signalled = threading.Event()  # a SIGTERM came (the next one ends the process)
_listening = threading.Event()  # a training loop hears notices now
_settled = threading.Event()  # a training loop acted on the notice: its step state is saved
_noticed: dict[str, float | None] = {"at": None}


def install() -> bool:
    """Make SIGTERM set the drain flag (and record when it came) instead of ending the process; a second
    SIGTERM ends it as the default action does (work outside training never reads the flag, and ``kill``
    twice still stops it). Python lets only the main thread set a signal handler: called from any other
    thread it changes nothing and returns False (forward the notice with :func:`request` instead); True
    once installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _on_signal)
    return True


def _on_signal(signum: int, frame: Any) -> None:
    if _signalled.is_set():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _signalled.set()
    request()


def request() -> None:
    """Raise the drain flag (safe from any thread and from a signal handler); the first notice's time is
    kept."""
    if _noticed["at"] is None:
        _noticed["at"] = time.monotonic()
    _flag.set()


def requested() -> bool:
    """Whether a drain notice came."""
    return _flag.is_set()


def noticed_at() -> float | None:
    """When the first notice came (``time.monotonic()``), None without one."""
    return _noticed["at"]


def listen(on: bool) -> None:
    """Say that a training loop hears notices from now on (``on``), or no longer."""
    if on:
        _settled.clear()
        _listening.set()
    else:
        _listening.clear()


def settle() -> None:
    """Say that the notice was acted on: the step state is saved."""
    _settled.set()


def forward(wait_s: float) -> bool:
    """Raise the flag for a notice some other handler received (a Ray worker turns SIGTERM into an exit
    of its main thread while the cell trains on another), and wait up to ``wait_s`` seconds for a training
    loop that hears notices to save its step state; whether one did. Without one it returns at once."""
    request()
    return _listening.is_set() and _settled.wait(wait_s)


def reset() -> None:
    """Lower the flag and forget the notice (tests, and a process that runs another cell afterwards)."""
    _flag.clear()
    _signalled.clear()
    _listening.clear()
    _settled.clear()
    _noticed["at"] = None
