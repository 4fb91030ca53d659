"""The signal store: what scoring a set of texts with one model produced, as one Parquet table.

``signals.parquet`` (the design's contract) has one row per scored text: ``sample_id``, ``member``,
``token_ids`` (list<int32>), ``logp``, ``mu``, ``sigma`` (list<float32>), plus per-row columns the
attacks need: ``zlib_bytes`` (int64), and, when the cell computes those views, ``neighbour_nll``
(list<float64>: the adapted model's mean NLL on each neighbour text) and ``grad_norm`` (float64).
Sample text itself is never stored.

:class:`SignalStore` keeps tables under a directory, each named by a key over everything the numbers
depend on (base model id and revision, adaptation content hash, tokenizer, dtype, max length, text hash
and :data:`SIGNALS_FORMAT`), so a changed input never reuses a stale entry and the un-adapted base's
signals (the reference model's) are computed once per (base, split) and shared by every adaptation.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .cache import file_lock, stable_hash

if TYPE_CHECKING:  # scoring imports torch; attack jobs read signals without it
    from .scoring import TokenStats

SIGNALS_FORMAT = 1  # bump when what a signals table holds, or how it is computed, changes

_LIST_F32 = pa.list_(pa.float32())


def zlib_bytes(text: str) -> int:
    """Length in bytes of the zlib-compressed UTF-8 text (the zlib attack's entropy estimate)."""
    return len(zlib.compress(text.encode("utf-8")))


@dataclass
class Signals:
    """Per-text signals, columns as lists/arrays in row order."""

    sample_id: list[str]
    member: np.ndarray  # bool
    token_ids: list[np.ndarray]
    logp: list[np.ndarray]
    mu: list[np.ndarray]
    sigma: list[np.ndarray]
    zlib_bytes: np.ndarray  # int64
    neighbour_nll: list[np.ndarray] | None = None
    grad_norm: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sample_id)

    @property
    def nll(self) -> np.ndarray:
        """Mean per-token NLL of every text (float64)."""
        return np.array([-np.mean(lp, dtype=np.float64) for lp in self.logp])

    @classmethod
    def from_stats(
        cls,
        sample_ids: Sequence[str],
        member: Sequence[bool],
        stats: Sequence[TokenStats],
        texts: Sequence[str],
    ) -> Signals:
        """Signals of scored texts; ``texts`` are the scored (target) texts, used only for zlib."""
        return cls(
            sample_id=list(sample_ids),
            member=np.asarray(member, dtype=bool),
            token_ids=[s.token_ids for s in stats],
            logp=[s.logp for s in stats],
            mu=[s.mu for s in stats],
            sigma=[s.sigma for s in stats],
            zlib_bytes=np.array([zlib_bytes(t) for t in texts], dtype=np.int64),
        )

    def to_table(self) -> pa.Table:
        columns = {
            "sample_id": pa.array(self.sample_id, pa.string()),
            "member": pa.array(self.member, pa.bool_()),
            "token_ids": pa.array([t.tolist() for t in self.token_ids], pa.list_(pa.int32())),
            "logp": pa.array([x.tolist() for x in self.logp], _LIST_F32),
            "mu": pa.array([x.tolist() for x in self.mu], _LIST_F32),
            "sigma": pa.array([x.tolist() for x in self.sigma], _LIST_F32),
            "zlib_bytes": pa.array(self.zlib_bytes, pa.int64()),
        }
        if self.neighbour_nll is not None:
            columns["neighbour_nll"] = pa.array(
                [x.tolist() for x in self.neighbour_nll], pa.list_(pa.float64())
            )
        if self.grad_norm is not None:
            columns["grad_norm"] = pa.array(self.grad_norm, pa.float64())
        return pa.table(columns)

    @classmethod
    def from_table(cls, table: pa.Table) -> Signals:
        def lists(name: str, dtype: Any) -> list[np.ndarray]:
            return [np.asarray(x, dtype=dtype) for x in table.column(name).to_pylist()]

        names = table.column_names
        return cls(
            sample_id=table.column("sample_id").to_pylist(),
            member=np.asarray(table.column("member").to_pylist(), dtype=bool),
            token_ids=lists("token_ids", np.int32),
            logp=lists("logp", np.float32),
            mu=lists("mu", np.float32),
            sigma=lists("sigma", np.float32),
            zlib_bytes=np.asarray(table.column("zlib_bytes").to_pylist(), dtype=np.int64),
            neighbour_nll=lists("neighbour_nll", np.float64) if "neighbour_nll" in names else None,
            grad_norm=np.asarray(table.column("grad_norm").to_pylist()) if "grad_norm" in names else None,
        )

    def aligned_to(self, sample_ids: Sequence[str]) -> Signals:
        """These signals reordered to ``sample_ids`` (every id must be present)."""
        index = {s: i for i, s in enumerate(self.sample_id)}
        missing = [s for s in sample_ids if s not in index]
        if missing:
            raise KeyError(f"signals lack {len(missing)} sample(s), e.g. {missing[0]!r}")
        order = [index[s] for s in sample_ids]

        def pick(column: Any) -> Any:
            if column is None:
                return None
            return column[order] if isinstance(column, np.ndarray) else [column[i] for i in order]

        return Signals(
            list(sample_ids),
            pick(self.member),
            pick(self.token_ids),
            pick(self.logp),
            pick(self.mu),
            pick(self.sigma),
            pick(self.zlib_bytes),
            pick(self.neighbour_nll),
            pick(self.grad_norm),
        )


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


def read_table(path: str | Path) -> pa.Table:
    """One Parquet file, read whole. ``pq.read_table`` would go through pyarrow's dataset layer, whose
    first use imports pandas (about 0.4 s in a process that has no other use for it: an attack worker)."""
    return pq.ParquetFile(path).read()


def write_table(table: pa.Table, path: Path) -> None:
    """Write a Parquet file atomically."""
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temporary sibling, then rename)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def signal_key(
    model_id: str,
    revision: str | None,
    adaptation_hash: str,
    tokenizer_id: str,
    dtype: str,
    max_length: int,
    text_hash: str,
) -> dict[str, Any]:
    """Everything a signals table depends on: the key material of a :class:`SignalStore` entry."""
    return {
        "model": model_id,
        "revision": revision,
        "adaptation": adaptation_hash,
        "tokenizer": tokenizer_id,
        "dtype": dtype,
        "max_length": max_length,
        "texts": text_hash,
        "format": SIGNALS_FORMAT,
    }


class SignalStore:
    """Signals tables under ``root``, one file per key; computed at most once per key."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: dict[str, Any]) -> Path:
        return self.root / f"{stable_hash(key, 16)}.parquet"

    def get_or_compute(self, key: dict[str, Any], compute: Callable[[], Signals]) -> Signals:
        """The stored signals for ``key``, computing and storing them first if absent."""
        path = self.path(key)
        if not path.exists():
            with file_lock(path.with_suffix(".lock")):
                if not path.exists():
                    write_table(compute().to_table(), path)
        return Signals.from_table(read_table(path))
