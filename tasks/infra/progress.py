"""Progress of the long steps (pre-training a base, training a technique, auditing checkpoints).

On a terminal each step is a live tqdm line with its rate and ETA. Elsewhere (a log file, CI) it is a
plain line every :data:`PERIOD` seconds and one when it ends, so a log shows where a run is without
carriage-return noise. Inside a worker whose output nobody reads (a Ray task building a base), the
caller points :func:`to_folder` at a folder and every step writes its state there as ``<pid>.json``,
which the driver reads with :func:`read_folder` and prints.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

#: seconds between plain lines when not on a terminal (and between writes of a progress file)
PERIOD = 30.0
_folder: Path | None = None


def to_folder(folder: str | Path | None) -> None:
    """Report this process's steps as files in ``folder`` (None: print them, as by default)."""
    global _folder
    _folder = None if folder is None else Path(folder)


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1.5 h``: an ETA to the precision it has."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def line(label: str, done: int, total: int, elapsed: float) -> str:
    """``label: done/total (p %), elapsed 2 min, ETA 5 min``: the ETA from the rate so far."""
    text = f"{label}: {done}/{total} ({100 * done / max(total, 1):.0f} %), elapsed {duration(elapsed)}"
    if 0 < done < total:
        text += f", ETA {duration(elapsed * (total - done) / done)}"
    return text


class Progress:
    """One step of ``total`` units: ``update()`` after each, ``close()`` at the end (or use ``with``)."""

    def __init__(self, label: str, total: int, stream: Any = None, quiet: bool = False) -> None:
        self.label, self.total, self.done, self.quiet = label, total, 0, quiet
        self.stream = stream or sys.stderr
        self.started = self.shown = time.monotonic()
        self.bar = None
        if not quiet and _folder is None and self.stream.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, leave=False, file=self.stream, mininterval=1)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)
            return
        now = time.monotonic()
        if not self.quiet and now - self.shown >= (2.0 if _folder else PERIOD):
            self.shown = now
            self._emit(now)

    def _emit(self, now: float) -> None:
        elapsed = now - self.started
        if _folder is not None:
            state = {"label": self.label, "done": self.done, "total": self.total, "elapsed": elapsed}
            _folder.mkdir(parents=True, exist_ok=True)
            partial = _folder / f".{os.getpid()}.json.tmp"
            partial.write_text(json.dumps(state))
            partial.replace(_folder / f"{os.getpid()}.json")
        else:
            print(line(self.label, self.done, self.total, elapsed), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif not self.quiet and (_folder is not None or time.monotonic() - self.started >= PERIOD):
            # a short step (under PERIOD) stays silent on a log
            self._emit(time.monotonic())


def read_folder(folder: Path) -> list[str]:
    """The latest line of every process reporting into ``folder``."""
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):  # replaced while read
            continue
        found.append(line(state["label"], state["done"], state["total"], state["elapsed"]))
    return found
