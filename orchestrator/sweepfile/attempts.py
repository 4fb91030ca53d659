"""The confirmatory attempts log: each run of a pre-registered hypothesis's test on a set of cells not
tried before is one attempt, appended to ``hypothesis_attempts.jsonl`` in the results folder (the board
keeps each as one file under ``attempts/``). The same hypothesis on the same cells is the same attempt, so
a report or a release page built again adds none."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hypothesis import Hypothesis

ATTEMPTS = "hypothesis_attempts.jsonl"


def read_attempts(path: Path) -> list[dict[str, Any]]:
    """The entries of an attempts log (``hypothesis_attempts.jsonl``; none where it is absent)."""
    path = Path(path)
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def attempt_entry(hypothesis: Hypothesis, cell_ids: set[str], page: Mapping[str, Any]) -> dict[str, Any]:
    """One confirmatory attempt: the hypothesis's digest, the cells it ran on (a digest of their ids: the
    same cells are the same attempt) and Page's result."""
    cells = hashlib.sha256("\n".join(sorted(cell_ids)).encode()).hexdigest()[:12]
    return {"hypothesis": hypothesis.digest(), "cells": cells, "n_cells": len(cell_ids), "L": page.get("L"),
            "p_value": page.get("p_value"), "n_blocks": page.get("n_blocks")}  # fmt: skip


def log_attempt(out: Path, hypothesis: Hypothesis, cell_ids: set[str], page: dict[str, Any]) -> int:
    """Append a confirmatory attempt to ``out/hypothesis_attempts.jsonl`` unless this hypothesis was
    already tried on exactly these cells (a report run again is the same attempt); returns how many
    attempts the log holds for this hypothesis."""
    path = Path(out) / ATTEMPTS
    entry = attempt_entry(hypothesis, cell_ids, page)
    mine = [e for e in read_attempts(path) if e.get("hypothesis") == entry["hypothesis"]]
    if not any(e.get("cells") == entry["cells"] for e in mine):
        with path.open("a") as log:
            log.write(json.dumps(entry, sort_keys=True) + "\n")
        mine.append(entry)
    return len(mine)


def attempts(out: Path, hypothesis: Hypothesis) -> int:
    """How many confirmatory attempts ``out``'s log holds for ``hypothesis``."""
    digest = hypothesis.digest()
    return sum(e.get("hypothesis") == digest for e in read_attempts(Path(out) / ATTEMPTS))
