"""A finished cell's split as the files an audit reads: each part's records as JSONL (``id``, ``prompt``,
``target``), exactly the records the cell trained on and scored, so ``privauditor audit`` of the cell's
adapter with them measures what the cell measured (docs/audit.md walks through it)."""

from __future__ import annotations

import json
from pathlib import Path

from ..data.splits import PARTS, draw_split
from ..datasets import load_dataset
from ..infra.errors import PrivauditorError
from ..infra.files import write_text
from ..infra.results import CellFolder, Results
from ..spec.resolved import spec_of


def export_split(results: str | Path, cell_id: str, to: str | Path) -> dict[str, Path]:
    """Write ``to/<part>.jsonl`` for each non-empty part of cell ``cell_id``'s split in ``results``; the
    files by part. The split is drawn again from the cell's dataset and seed and checked against the
    content hashes its ``cell.json`` recorded: a dataset that changed since is a one-line error."""
    cell = _finished(Results.at(results), cell_id)
    record = cell.record()
    if "audit" in record:
        raise PrivauditorError(
            f"{cell_id} is an audit: its members and non-members are the files it was given"
        )
    spec = spec_of(record)
    split = draw_split(load_dataset(spec.dataset), spec.split, spec.seed)
    if split.hashes() != record["provenance"]["split"]:
        raise PrivauditorError(
            f"dataset '{spec.dataset}' no longer gives the split {cell_id} trained on (its content changed)"
        )
    to, written = Path(to), {}
    for part in PARTS:
        examples = getattr(split, part)
        if examples:
            lines = (
                json.dumps({"id": e.sample_id, "prompt": e.prompt, "target": e.target}) for e in examples
            )
            written[part] = to / f"{part}.jsonl"
            write_text(written[part], "".join(line + "\n" for line in lines))
    return written


def _finished(results: Results, cell_id: str) -> CellFolder:
    if not results.cells_dir.is_dir():
        raise PrivauditorError(f"{results.uri} is not a results folder (no cells/ inside)")
    if not results.done(cell_id):
        known = results.cell_ids()
        hint = f" (finished: {', '.join(known[:5])}{' ...' if len(known) > 5 else ''})" if known else ""
        raise PrivauditorError(f"no finished cell {cell_id} in {results.uri}{hint}")
    return results.cell(cell_id)
