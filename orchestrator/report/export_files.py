"""The public export formats' files: one writer per format, each cell at its last checkpoint, called by
``privauditor publish`` (a results folder: both formats) and ``privauditor board export`` (a board: the
formats asked for), so both write the same bytes for the same rows.

- ``hf-eval-results``: ``eval_results/<cell_id>.yaml`` (the Hub's ``.eval_results`` entries),
  ``<cell_id>.model-index.yaml`` (the model card's ``model-index`` block) and ``<cell_id>.model-card.md``
  (a section to paste into the model card: :mod:`.model_card`);
- ``every-eval-ever``: ``every_eval_ever/data/privauditor/privauditor/<cell_id>/<uuid>.json``.

What each file holds, and why: :mod:`.exports`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.files import write_text

from .exports import eee_path, eee_record, hub_entries, last_checkpoints, model_index, version, yaml_text
from .model_card import section


def write_hub(
    to: Path, rows: Sequence[Mapping[str, Any]], finished: str, v: str, source_url: str | None
) -> list[Path]:
    """One cell's Hub files under ``to/eval_results/``: entries, ``model-index`` block, model-card section."""
    cell_id, folder = rows[0]["cell_id"], to / "eval_results"
    index = yaml_text(model_index(rows, v, source_url=source_url))
    texts = {
        f"{cell_id}.yaml": yaml_text(hub_entries(rows, finished, v, source_url=source_url)),
        f"{cell_id}.model-index.yaml": index,
        f"{cell_id}.model-card.md": section(rows, v, index),
    }
    for name, text in texts.items():
        write_text(folder / name, text)
    return [folder / name for name in texts]


def write_eee(
    to: Path, rows: Sequence[Mapping[str, Any]], finished: str, v: str, source_url: str | None
) -> list[Path]:
    """One cell's Every Eval Ever record under ``to/every_eval_ever/`` (it has no field for a URL)."""
    record = eee_record(rows, finished, v)
    path = to / "every_eval_ever" / eee_path(record)
    write_text(path, json.dumps(record, indent=2, allow_nan=False) + "\n")
    return [path]


Writer = Callable[[Path, Sequence[Mapping[str, Any]], str, str, str | None], list[Path]]
#: the formats by their command-line names, in the order they are written
WRITERS: dict[str, Writer] = {"hf-eval-results": write_hub, "every-eval-ever": write_eee}
FORMATS = tuple(WRITERS)


def formats(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` checked and in :data:`FORMATS` order, each once; an unknown name is a one-line error."""
    names = list(names)
    unknown = [n for n in names if n not in WRITERS]
    if unknown or not names:
        raise PrivauditorError(
            f"unknown export format {unknown[0]!r}: choose {' or '.join(FORMATS)}"
            if unknown
            else f"no export format: choose {' or '.join(FORMATS)}"
        )
    return tuple(n for n in FORMATS if n in names)


def write(
    to: Path,
    found: Sequence[Mapping[str, Any]],
    finished: Mapping[str, str],
    chosen: Iterable[str] = FORMATS,
    source_url: str | None = None,
) -> list[Path]:
    """The files of the formats ``chosen`` for the leaderboard rows ``found`` (each cell at its last
    checkpoint) under ``to``; ``finished``: each cell's finishing time (``YYYY-MM-DDTHH:MM:SSZ``).
    Returns the files written."""
    to, written, v, chosen = Path(to), [], version(), formats(chosen)
    for cell_id, rows in last_checkpoints(found).items():
        for name in chosen:
            written += WRITERS[name](to, rows, finished[cell_id], v, source_url)
    return written
