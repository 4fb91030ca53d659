"""Datasets: offline generators and real loaders for ``finance``, ``sql`` and ``climate``.

A dataset name resolves, in order, to:

1. a registered plugin name (``finance``): its offline version, generated deterministically;
2. a plugin's real dataset id (``sujet-ai/Sujet-Finance-Instruct-177k``): loaded with
   ``datasets.load_dataset`` and mapped to the plugin's schema;
3. a local file (JSONL / CSV / Parquet / TXT) or dataset directory: with ``schema=<plugin>`` it is read
   as that plugin's records; without, ``text`` or ``prompt`` + ``target`` columns are used as they
   are, and other columns pick the plugin whose fields (or real column names) they contain.

Example::

    from privauditor.tasks.datasets import load_dataset
    data = load_dataset("finance")
    print(data.report.summary(), data.examples[0].target)
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..infra.errors import DataError, unknown_name_message
from ..infra.registry import Registry
from ._base import MAX_RECORD_CHARS, DatasetPlugin, Example, LoadReport, build_examples, content_hash
from ._sources import FILE_SUFFIXES, read_file, read_hub

DATASETS: Registry[type[DatasetPlugin]] = Registry("dataset", __name__, group="privauditor.datasets")

log = logging.getLogger(__name__)

__all__ = [
    "DATASETS",
    "DatasetPlugin",
    "Example",
    "LoadedDataset",
    "LoadReport",
    "content_hash",
    "dataset_identity",
    "load_dataset",
]


@dataclass(frozen=True)
class LoadedDataset:
    """Rendered examples of one dataset, where they came from, and what was dropped."""

    name: str
    source: str
    examples: tuple[Example, ...]
    report: LoadReport
    sha256: str
    #: records no split draws from (an offline dataset's reserved pool; empty for hub and local data)
    reserved: tuple[Example, ...] = ()


def _plugin_for_hub_id(name: str) -> type[DatasetPlugin] | None:
    return next((cls for _, cls in DATASETS.items() if cls.hub_id == name), None)


def pii_patterns(name: str) -> dict[str, str]:
    """The PII fields a dataset plugin declares, by plugin name or its hub id; none for other data."""
    plugin = DATASETS.get(name) if name in DATASETS else _plugin_for_hub_id(name)
    return dict(plugin.pii) if plugin is not None else {}


def _plugin_for_columns(columns: set[str]) -> type[DatasetPlugin] | None:
    for _, cls in DATASETS.items():
        mapped = {cls.column_map.get(c, c) for c in columns}
        if set(cls.fields) <= mapped:
            return cls
    return None


def load_dataset(
    name: str,
    *,
    schema: str | None = None,
    seed: int = 0,
    size: int | None = None,
    revision: str | None = None,
    max_chars: int = MAX_RECORD_CHARS,
) -> LoadedDataset:
    """Load and render a dataset by plugin name, real dataset id or local path (see module doc).

    ``seed`` and ``size`` apply to offline generation only (the records, not the split: splits are
    drawn by :mod:`privauditor.tasks.data.splits`). An offline dataset also generates its plugin's
    ``reserved_size`` records after the ``size``: its ``reserved`` pool, outside ``examples`` and so outside
    every split.
    """
    plugin_cls = DATASETS.get(schema) if schema else None
    if plugin_cls is None and name in DATASETS:
        return _offline(name, seed, size, max_chars)

    path = Path(name).expanduser()
    if path.is_file():
        stat = path.stat()
        return _local_file(name, schema, max_chars, str(path.resolve()), stat.st_size, stat.st_mtime_ns)

    plugin_cls = plugin_cls or _plugin_for_hub_id(name)
    looks_like_id = (
        "/" in name and not name.startswith((".", "/", "~")) and path.suffix.lower() not in FILE_SUFFIXES
    )
    if plugin_cls is None or not (path.is_dir() or looks_like_id):
        if path.suffix.lower() in FILE_SUFFIXES or name.startswith((".", "/", "~")):
            raise DataError(f"dataset file '{name}' does not exist")
        known = DATASETS.names() + [c.hub_id for _, c in DATASETS.items() if c.hub_id]
        raise DataError(unknown_name_message("dataset", name, known) + "; or give a local file path")
    plugin = plugin_cls()
    config = plugin.hub_config if name == plugin.hub_id else None
    rows = list(read_hub(name, config, plugin.hub_split, revision))
    return _finish(name, name, rows, plugin, max_chars)


def dataset_identity(name: str, revision: str | None = None) -> str:
    """What a dataset's records are, for cell ids: ``sha256:<hex>`` of the rendered records of an offline
    dataset or a local file (read once per process while the file is unchanged), or, for a dataset on the
    hub (whose records cannot be read without it), ``hub:<id>@<revision>``."""
    if name in DATASETS or Path(name).expanduser().exists():
        return f"sha256:{load_dataset(name).sha256}"
    if _plugin_for_hub_id(name) is None:
        load_dataset(name)  # the loader's one-line error for a name that is none of the above
    return f"hub:{name}@{revision or 'main'}"


@functools.lru_cache(maxsize=16)
def _local_file(name: str, schema: str | None, max_chars: int, *file: Any) -> LoadedDataset:
    """A local file's dataset, read once per process while the file (``file``: path, size, modification
    time) is unchanged."""
    path = Path(file[0])
    plugin_cls = DATASETS.get(schema) if schema else None
    rows = list(read_file(path))
    columns = {k for _, row in rows if isinstance(row, dict) for k in row}
    generic = "text" in columns or "messages" in columns or {"prompt", "target"} <= columns
    if plugin_cls is None and not generic:  # a user's own text file stays generic
        plugin_cls = _plugin_for_columns(columns)
    return _finish(name, path.name, rows, plugin_cls() if plugin_cls else None, max_chars)


@functools.lru_cache(maxsize=8)
def _offline(name: str, seed: int, size: int | None, max_chars: int) -> LoadedDataset:
    """An offline dataset, generated once per process (a fifth of a second for 3,000 records, paid by
    every cell otherwise); deterministic in its arguments and immutable, so sharing it is safe."""
    plugin = DATASETS.get(name)()
    pool = size or plugin.offline_size
    # one generation of pool + reserved records: the pool's records are those a pool-sized run makes
    generated = [(f"id {r['id']}", r) for r in plugin.generate(pool + plugin.reserved_size, seed)]
    data = _finish(name, f"offline {name} (seed {seed})", generated[:pool], plugin, max_chars)
    reserved, _ = build_examples(generated[pool:], plugin, f"reserved {name} (seed {seed})", max_chars)
    texts = {e.text for e in data.examples}
    return dataclasses.replace(data, reserved=tuple(e for e in reserved if e.text not in texts))


def _finish(name, source, rows, plugin, max_chars) -> LoadedDataset:
    examples, report = build_examples(rows, plugin, source, max_chars)
    if report.dropped:
        log.warning("%s", report.summary())
    if not examples:
        raise DataError(f"dataset '{name}' has no usable records ({report.summary()})")
    return LoadedDataset(name, source, tuple(examples), report, content_hash(examples))
