"""What a sweep leaves on the results file system, per cell, by a documented rule (no run needed):

- **snapshots**: at every checkpoint that saves (``train.checkpoints``; a technique that trains nothing
  saves none) the trained weights as they are, fp32 (:data:`SNAPSHOT_BYTES` per trained parameter; a full
  fine-tune: every parameter), and once more as the cell's final adapter;
- **signals**: per scored record (members and non-members) and token, an int32 token id, five float32
  per-token figures and an int16 rank (:data:`SIGNAL_BYTES`), in :data:`SIGNAL_FILES` files per checkpoint
  (the view and the checkpoint's copy) and two more per cell (its own copy, and the reference model's
  view);
- **scores**: a row per record, attack and checkpoint (:data:`SCORE_ROW_BYTES`).

The per-token and per-row bytes are those of the files of a finished smoke run (``privauditor run smoke``:
96 records of 68 tokens, 171 KB per signals file; 768 score rows, 9.1 KB), uncompressed float columns
as parquet writes them. Tokens per record are the plan's (``max_length`` where the records are not at hand:
an upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from .plan import Planned

SNAPSHOT_BYTES = 4  # a trained parameter is fp32 at every precision (memory.py's TRAINED_WEIGHT)
SIGNAL_BYTES = 26  # int32 token id, five float32 (logp, mu, sigma, top1_logp, topk_lse), int16 rank
SIGNAL_FILES = 2  # per checkpoint: the signals view and the checkpoint's signals.parquet
SCORE_ROW_BYTES = 12


@dataclass(frozen=True)
class Storage:
    snapshots: int
    signals: int
    scores: int

    @property
    def total(self) -> int:
        return self.snapshots + self.signals + self.scores


def cell_storage(p: Planned) -> Storage:
    """The bytes one planned cell writes, by the module's rule."""
    spec, cw = p.spec, p.work
    checkpoints = len(spec.train.checkpoints or (0,))
    saves = int(cw.own.stages.get("save", {}).get("cell", 0))
    trained = cw.trainable if cw.technique.trains else 0
    snapshots = trained * SNAPSHOT_BYTES * (saves + (1 if saves else 0))
    records = spec.split.members + spec.split.nonmembers
    tokens = cw.tokens.target if cw.shape.seq2seq else cw.tokens.text
    signals = int(records * tokens * SIGNAL_BYTES * (SIGNAL_FILES * checkpoints + 2))
    scores = records * len(spec.attacks) * checkpoints * SCORE_ROW_BYTES
    return Storage(snapshots, signals, scores)


def storage_line(planned: list[Planned]) -> str:
    """The sweep's storage, in all and by kind, with the largest cell's."""
    found = [cell_storage(p) for p in planned]
    if not found:
        return "storage: nothing"
    parts = {kind: sum(getattr(s, kind) for s in found) for kind in ("snapshots", "signals", "scores")}
    largest = max(range(len(found)), key=lambda i: found[i].total)
    return (f"storage: about {_size(sum(parts.values()))} on the results file system ({_size(parts['snapshots'])} of "
            f"adapter and weight snapshots at the checkpoints, {_size(parts['signals'])} of signals and views, "
            f"{_size(parts['scores'])} of scores); the largest cell {planned[largest].spec.cell_id()} "
            f"{_size(found[largest].total)} (rule: orchestrator/plan/storage.py)")  # fmt: skip


def _size(count: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count / 1e3:.3g} kB"
