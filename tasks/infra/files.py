"""Files written whole or not at all: every results-folder and cache file goes through :func:`atomic_write`
(a hidden temporary sibling, then a rename), so a reader never sees part of one and a killed writer
leaves only a temporary file the next run clears; a whole export folder likewise (:func:`replace_folder`);
and Parquet read without pyarrow's dataset layer."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def atomic_write(path: Path, write: Callable[[Path], Any], suffix: str = "") -> Path:
    """``write(tmp)`` into a hidden sibling ``.NAME.tmp-PID[suffix]``, then rename it over ``path``: a
    reader sees the old file or the whole new one, never part. A killed writer leaves only the hidden
    temporary file, which the next run clears."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}{suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # only left when write() raised
    return path


def replace_folder(path: Path, build: Callable[[Path], Any]) -> Path:
    """``build(tmp)`` into an empty hidden sibling folder ``.NAME.tmp-PID``, then put it in ``path``'s place
    (an earlier ``path`` removed): a reader never finds half a folder, and a ``build`` that raises leaves
    ``path`` as it was and no temporary folder. The caller decides whether ``path`` may be replaced."""
    import shutil

    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        build(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def read_table(path: str | Path) -> pa.Table:
    """One Parquet file, read whole. ``pq.read_table`` would go through pyarrow's dataset layer, whose
    first use imports pandas (about 0.4 s in a process that has no other use for it: an attack worker)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read()


def write_table(table: pa.Table, path: Path) -> None:
    """Write a Parquet file atomically."""
    import pyarrow.parquet as pq

    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary sibling, then rename)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
