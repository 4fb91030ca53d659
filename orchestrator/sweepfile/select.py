"""``privauditor run SWEEP --only KEY=VALUE[,VALUE]``: a part of a sweep's matrix (one block, one seed),
run as the same sweep (the same results folder takes the rest later: the matrix is not part of what a
folder's writer records)."""

from __future__ import annotations

import dataclasses

from privauditor.tasks.infra.errors import PrivauditorError, unknown_name_message

from .sweep import MATCH_KEYS, Sweep


def only(sweep: Sweep, filters: list[str]) -> Sweep:
    """``sweep`` with only the cells every ``KEY=VALUE[,VALUE...]`` filter matches (keys: a matrix key,
    ``defence`` or ``seed``); a filter that is malformed, or that leaves no cell, is a one-line error."""
    wanted: dict[str, set[str]] = {}
    for text in filters:
        key, sep, values = text.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            raise PrivauditorError(f"--only {text!r}: expected KEY=VALUE[,VALUE...], e.g. dataset=finance")
        if key not in MATCH_KEYS:
            raise PrivauditorError(f"--only {text!r}: " + unknown_name_message("key", key, list(MATCH_KEYS)))
        wanted.setdefault(key, set()).update(v.strip() for v in values.split(","))
    cells = tuple(c for c in sweep.cells if all(str(getattr(c, k)) in v for k, v in wanted.items()))
    if not cells:
        shown = "; ".join(
            f"{k}: {', '.join(sorted({str(getattr(c, k)) for c in sweep.cells}))}" for k in wanted
        )
        raise PrivauditorError(
            f"--only {' '.join(filters)} matches no cell of sweep '{sweep.name}' ({shown})"
        )
    return dataclasses.replace(sweep, cells=cells, dropped=())
