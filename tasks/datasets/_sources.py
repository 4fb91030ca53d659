"""Raw rows from local files and from the Hugging Face hub, as ``(locator, row)`` pairs.

Local files are read here rather than through ``datasets`` so that one bad line (invalid UTF-8, broken
JSON) is reported by its line number instead of failing the whole file. Hub datasets (and local dataset
directories) go through ``datasets.load_dataset``. Either way the rows then take the same path
(:func:`privauditor.tasks.datasets._base.build_examples`).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..infra.errors import DataError
from ._base import BadRow

FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".txt")

Row = tuple[str, Mapping[str, Any] | BadRow]


def read_file(path: Path) -> Iterator[Row]:
    """Rows of a JSONL / CSV / Parquet / TXT file (TXT: one record per line, as ``text``)."""
    if not path.is_file():
        raise DataError(f"dataset file '{path}' does not exist")
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise DataError(
            f"dataset file '{path}' has unsupported suffix '{suffix}' (allowed: {', '.join(FILE_SUFFIXES)})"
        )
    if path.stat().st_size == 0:
        raise DataError(f"dataset file '{path}' is empty")
    if suffix == ".parquet":
        yield from _read_parquet(path)
    elif suffix == ".csv":
        yield from _read_csv(path)
    else:
        yield from _read_lines(path, as_json=suffix in (".jsonl", ".json"))


def _read_lines(path: Path, as_json: bool) -> Iterator[Row]:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            locator = f"line {number}"
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)  # as Excel and Notepad write UTF-8: not text
            if not raw.strip():
                continue  # blank lines separate nothing in JSONL/TXT; not a record
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                yield locator, BadRow("not valid UTF-8")
                continue
            if not as_json:
                yield locator, {"text": line}
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                yield locator, BadRow("not valid JSON")
                continue
            yield locator, row if isinstance(row, dict) else BadRow("not a JSON object")


def _read_csv(path: Path) -> Iterator[Row]:
    # surrogateescape keeps undecodable bytes as lone surrogates, which the row validation reports
    # as "not valid UTF-8" for just the rows that hold them.
    # utf-8-sig drops a leading byte-order mark (as Excel writes), which would else be part of the first
    # column's name.
    text = path.read_bytes().decode("utf-8-sig", errors="surrogateescape")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for number, row in enumerate(reader, start=2):  # line 1 is the header
        yield f"line {number}", {k: v for k, v in row.items() if k is not None}


def _read_parquet(path: Path) -> Iterator[Row]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise DataError(f"dataset file '{path}' is not readable Parquet ({type(exc).__name__})") from None
    for number, row in enumerate(table.to_pylist(), start=1):
        yield f"row {number}", row


def read_hub(path_or_id: str, config: str | None, split: str, revision: str | None) -> Iterator[Row]:
    """Rows of a Hugging Face dataset (a hub id or a local dataset directory)."""
    import datasets

    try:
        dataset = datasets.load_dataset(path_or_id, config, split=split, revision=revision)
    except Exception as exc:  # offline, missing, gated: all end here with the library's reason
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot load dataset '{path_or_id}' (split {split}): {first_line}") from None
    for number, row in enumerate(dataset, start=1):
        yield f"row {number}", row
