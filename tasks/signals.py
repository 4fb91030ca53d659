"""Per-text signals of one model (the ``signals`` view's table).

``signals.parquet`` (the design's contract) has one row per scored text: ``sample_id``, ``member``,
``token_ids`` (list<int32>), ``logp``, ``mu``, ``sigma`` (list<float32>), and ``zlib_bytes`` (int64, the
zlib attack's entropy estimate of the scored target text). Sample text itself is never stored. Other
inputs of attacks (neighbours' scores, gradient norms, ...) are views of their own
(:mod:`privauditor.tasks.views`), each in its own file.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # scoring imports torch; attack jobs read signals without it
    from .scoring import TokenStats

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
        return pa.table(columns)

    @classmethod
    def from_table(cls, table: pa.Table) -> Signals:
        def lists(name: str, dtype: Any) -> list[np.ndarray]:
            return [np.asarray(x, dtype=dtype) for x in table.column(name).to_pylist()]

        return cls(
            sample_id=table.column("sample_id").to_pylist(),
            member=np.asarray(table.column("member").to_pylist(), dtype=bool),
            token_ids=lists("token_ids", np.int32),
            logp=lists("logp", np.float32),
            mu=lists("mu", np.float32),
            sigma=lists("sigma", np.float32),
            zlib_bytes=np.asarray(table.column("zlib_bytes").to_pylist(), dtype=np.int64),
        )
