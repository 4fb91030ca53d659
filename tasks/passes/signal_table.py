"""Per-text signals of one model (the ``signals`` view's table).

``signals.parquet`` (the design's contract) has one row per scored text: ``sample_id``, ``member``,
``token_ids`` (list<int32>), ``logp``, ``mu``, ``sigma`` (list<float32>), and ``zlib_bytes`` (int64, the
zlib attack's entropy estimate of the scored target text); since the store's format 2 also
``top1_logp``, ``topk_lse`` (list<float32>) and ``rank`` (list<int16>, clipped at
:data:`RANK_CAP`), with the top-k's k in the schema metadata
(``privauditor.topk``); :mod:`privauditor.tasks.passes.forward` says what each holds. A store of format 1 is
refused with a one-line error. Sample text itself is never stored. Other
inputs of attacks (neighbours' scores, gradient norms, ...) are views of their own
(:mod:`privauditor.tasks.views`), each in its own file.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..infra.errors import PrivauditorError

if TYPE_CHECKING:
    import pyarrow as pa

#: Top-k sampling's k whose kept mass (log-sum-exp of the k largest log p) the signal store keeps.
TOPK = 40
#: The stored rank of a token outside the top-k: ranks are exact up to TOPK (every metric that reads a rank
#: asks whether the token is the first or within the top-k), and a worse one is stored as TOPK + 1.
RANK_CAP = TOPK + 1
#: The signal store's format: 2 added top1_logp, rank and topk_lse.
SIGNALS_FORMAT = 2
#: Where a store keeps its format and the top-k's k.
FORMAT_KEY, TOPK_KEY = b"privauditor.signals_format", b"privauditor.topk"
EXTENDED = ("top1_logp", "rank", "topk_lse")


def zlib_bytes(text: str) -> int:
    """Length in bytes of the zlib-compressed UTF-8 text (the zlib attack's entropy estimate)."""
    return len(zlib.compress(text.encode("utf-8")))


#: The per-token statistics beyond ``logp``, in the order scoring (tasks/passes/forward.py) returns them.
MOMENTS = ("mu", "sigma", "top1_logp", "rank", "topk_lse")
RANK_COLUMN = 1 + MOMENTS.index("rank")  # after logp


@dataclass
class TokenStats:
    """One scored text: its target token ids and per-token statistics (float32; ``rank`` int16)."""

    token_ids: np.ndarray
    logp: np.ndarray
    mu: np.ndarray | None = None
    sigma: np.ndarray | None = None
    top1_logp: np.ndarray | None = None
    rank: np.ndarray | None = None
    topk_lse: np.ndarray | None = None

    def cut(self, n: int) -> TokenStats:
        """The first ``n`` tokens' statistics."""
        fields = (self.logp, *(getattr(self, name) for name in MOMENTS))
        return TokenStats(self.token_ids[:n], *(None if a is None else a[:n] for a in fields))

    @property
    def nll(self) -> float:
        """Mean per-token negative log-likelihood (nats)."""
        return float(-self.logp.mean()) if len(self.logp) else float("nan")


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
    # the store's format 2 (None only in signals made by hand for an attack that does not read them)
    top1_logp: list[np.ndarray] | None = None
    rank: list[np.ndarray] | None = None  # int16, clipped at RANK_CAP
    topk_lse: list[np.ndarray] | None = None
    topk: int | None = None  # the k of topk_lse

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
        topk: int | None = None,
    ) -> Signals:
        """Signals of scored texts; ``texts`` are the scored (target) texts, used only for zlib; ``topk``:
        the k of the stats' ``topk_lse`` (by default the scorer's)."""
        return cls(
            sample_id=list(sample_ids),
            member=np.asarray(member, dtype=bool),
            token_ids=[s.token_ids for s in stats],
            logp=[s.logp for s in stats],
            mu=[s.mu for s in stats],
            sigma=[s.sigma for s in stats],
            zlib_bytes=np.array([zlib_bytes(t) for t in texts], dtype=np.int64),
            top1_logp=[s.top1_logp for s in stats],
            rank=[s.rank for s in stats],
            topk_lse=[s.topk_lse for s in stats],
            topk=TOPK if topk is None else topk,
        )

    def needs(self, attack: str, *fields: str) -> None:
        """A one-line error unless every one of ``fields`` is there (signals made by hand may lack some)."""
        missing = [f for f in fields if getattr(self, f) is None]
        if missing:
            raise PrivauditorError(f"attack '{attack}' reads {', '.join(missing)}, which these signals lack")

    def to_table(self) -> pa.Table:
        import pyarrow as pa  # here, not at the top: scoring reads this module's constants without it

        floats = pa.list_(pa.float32())
        columns = {
            "sample_id": pa.array(self.sample_id, pa.string()),
            "member": pa.array(self.member, pa.bool_()),
            "token_ids": pa.array([t.tolist() for t in self.token_ids], pa.list_(pa.int32())),
            "logp": pa.array([x.tolist() for x in self.logp], floats),
            "mu": pa.array([x.tolist() for x in self.mu], floats),
            "sigma": pa.array([x.tolist() for x in self.sigma], floats),
            "zlib_bytes": pa.array(self.zlib_bytes, pa.int64()),
        }
        self.needs("signals", *EXTENDED)
        columns["top1_logp"] = pa.array([x.tolist() for x in self.top1_logp], floats)
        columns["rank"] = pa.array([x.tolist() for x in self.rank], pa.list_(pa.int16()))
        columns["topk_lse"] = pa.array([x.tolist() for x in self.topk_lse], floats)
        metadata = {FORMAT_KEY: str(SIGNALS_FORMAT).encode(), TOPK_KEY: str(self.topk).encode()}
        return pa.table(columns).replace_schema_metadata(metadata)

    @classmethod
    def from_table(cls, table: pa.Table) -> Signals:
        metadata = table.schema.metadata or {}
        found = metadata.get(FORMAT_KEY, b"1").decode()
        if found != str(SIGNALS_FORMAT) or not set(EXTENDED) <= set(table.column_names):
            raise PrivauditorError(
                f"a signal store of format {found} (this privauditor reads format {SIGNALS_FORMAT}, with "
                f"{', '.join(EXTENDED)}): score again into a new results folder"
            )

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
            top1_logp=lists("top1_logp", np.float32),
            rank=lists("rank", np.int16),
            topk_lse=lists("topk_lse", np.float32),
            topk=int(metadata[TOPK_KEY]),
        )
