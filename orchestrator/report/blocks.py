"""Blocks of a results folder: what ``findings.md`` ranks, and the per-sample reads it needs.

A **block** is one (model, dataset) pair. Inside it each technique has one trajectory per training seed
(its rows of one attack, by step); a **view** picks one AUC per (technique, seed): each cell's ``last``
checkpoint, its ``best`` (lowest validation NLL), or the AUC at a matched utility level
(:mod:`privauditor.orchestrator.report.matched`). A technique's value in a block is the mean over its seeds
(seeds are replicates of the block, not blocks). ``none``, the un-adapted base, is the control: it is
reported, never ranked.

Paired per-sample reads: techniques of one (block, seed) share their split, so their scores align by
sample id; :func:`contrast` turns them into a DeLong difference of two groups' mean AUCs with its
variance (DeLong et al. 1988; :func:`privauditor.tasks.stats.significance.delong_covariance`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

import numpy as np

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.results import Results

from .row_schema import Row

CONTROL = "none"
VIEWS = ("last", "best")

Block = tuple[str, str]
#: the rows these reads group: a leaderboard's (:class:`.row_schema.Row`) or a board's (the same columns
#: and its own, as plain dicts); each read gives back the rows it was given, of the same type
R = TypeVar("R", bound=Mapping[str, Any])
#: block → technique → seed → a trajectory: one cell's rows of one attack, one per checkpoint, by step
Trajectories: TypeAlias = dict[Block, dict[str, dict[int, list[R]]]]
#: block → technique → seed → the row a view reads from its trajectory
Picked: TypeAlias = dict[Block, dict[str, dict[int, R]]]
#: the numbers every row of a trajectory holds (a trained checkpoint's)
Measured = Literal["epoch", "utility_loss", "auc", "auc_ci_low", "auc_ci_high"]


def by_setting(
    rows: Sequence[R], attack: str
) -> dict[Block, dict[str, dict[str | None, dict[int, list[R]]]]]:
    """block → technique → setting → seed → the undefended rows of ``attack``, one per checkpoint, by step
    (a trajectory is one cell's: a folder a changed sweep was rerun into holds a technique under two
    settings, whose checkpoints never mix)."""
    found: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for row in rows:
        if row["attack"] == attack and row["epoch"] is not None and row.get("defence", "none") == "none":
            block = (row["model"], row["dataset"])
            found[block][row["adaptation"]][row.get("setting")][row["seed"]].append(row)
    for techniques in found.values():
        for settings in techniques.values():
            for seeds in settings.values():
                for points in seeds.values():
                    points.sort(key=lambda r: -1 if r["step"] is None else r["step"])
    return found


def trajectories(rows: Sequence[R], attack: str) -> Trajectories[R]:
    """block → technique → seed → its trajectory (:func:`by_setting`), for the reads that pair techniques
    by seed: a technique run under several settings in a block has no one trajectory per seed there and is
    left out of them in that block (:func:`several` names it; :func:`block_values` still ranks it)."""
    return {
        block: {name: next(iter(settings.values())) for name, settings in ts.items() if len(settings) == 1}
        for block, ts in by_setting(rows, attack).items()
    }


def several(rows: Sequence[Mapping[str, Any]], attack: str) -> dict[str, int]:
    """Technique → in how many blocks it was run under more than one setting."""
    found: dict[str, int] = defaultdict(int)
    for techniques in by_setting(rows, attack).values():
        for name, settings in techniques.items():
            found[name] += len(settings) > 1
    return {name: n for name, n in sorted(found.items()) if n}


def block_values(rows: Sequence[Mapping[str, Any]], attack: str, view: str) -> dict[Block, dict[str, float]]:
    """block → technique → the value the techniques are ranked on: the mean over its settings of the mean
    over seeds of ``attack``'s AUC at the checkpoint ``view`` picks from each trajectory (``none`` and
    blocks with nothing else left out). One definition for findings.md, leaderboard.html and the board."""
    found: dict[Block, dict[str, float]] = {}
    for block, techniques in sorted(by_setting(rows, attack).items()):
        here = {}
        for name, settings in techniques.items():
            means = []
            for seeds in settings.values():
                aucs = [a for a in (pick(p, view)["auc"] for p in seeds.values()) if a is not None]
                means += [float(np.mean(aucs))] if aucs else []
            if name != CONTROL and means:
                here[name] = float(np.mean(means))
        if here:
            found[block] = here
    return found


def pick(points: Sequence[R], view: str) -> R:
    """The row a view reads from one trajectory: the last checkpoint, or the best (lowest NLL)."""
    if view == "best":
        return next((r for r in points if r["best"]), points[-1])
    return points[-1]


def measured(row: Row, column: Measured) -> float:
    """A number every row of a trajectory holds: a trained checkpoint's epoch, validation NLL and attack
    AUC with its interval (the schema allows None for an audit's rows, which no trajectory holds)."""
    value = row[column]
    if value is None:
        raise PrivauditorError(
            f"cell {row['cell_id']} has no {column} at step {row['step']} ({row['attack']})"
        )
    return value


def chosen(found: Trajectories[R], view: str) -> Picked[R]:
    """block → technique → seed → the row ``view`` reads."""
    return {
        b: {t: {s: pick(p, view) for s, p in seeds.items()} for t, seeds in ts.items()}
        for b, ts in found.items()
    }


def values(
    picked: dict[Block, dict[str, dict[int, Any]]], field: str = "auc"
) -> dict[Block, dict[str, float]]:
    """block → technique → the mean over seeds of ``field`` (rows or plain numbers), ``none`` left out."""
    out: dict[Block, dict[str, float]] = {}
    for block, techniques in picked.items():
        out[block] = {}
        for name, seeds in techniques.items():
            numbers = [v[field] if isinstance(v, dict) else v for v in seeds.values()]
            numbers = [n for n in numbers if n is not None]
            if name != CONTROL and numbers:
                out[block][name] = float(np.mean(numbers))
    return out


def fractions(rows: list[Row]) -> dict[str, tuple[float, float]]:
    """Technique → (lowest, highest) trainable fraction over its cells."""
    found: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        fraction = row.get("trainable_fraction")
        if fraction is not None and row.get("defence", "none") == "none":
            found[row["adaptation"]].append(fraction)
    return {name: (min(v), max(v)) for name, v in found.items()}


def fraction_text(span: tuple[float, float] | None) -> str:
    """``36-50 %`` (two significant digits), one figure where both ends print alike."""
    if span is None:
        return "-"

    def short(x: float) -> str:
        p = 100 * x
        return f"{p:.0f}" if p >= 10 else f"{p:.2g}"

    low, high = short(span[0]), short(span[1])
    return f"{low} %" if low == high else f"{low}-{high} %"


@lru_cache(maxsize=1024)
def _checkpoint_scores(
    out: str, cell_id: str, step: int | None, attack: str
) -> dict[str, tuple[bool, float]] | None:
    """sample id → (member, score) of ``attack`` at one checkpoint; None where the per-sample file is not
    at hand (results on an object store keep only summaries in the local stage)."""
    import pyarrow.parquet as pq

    cell = Results(out).cell(cell_id)
    if not cell.has_record:
        return None
    path = next((c["path"] for c in cell.record()["checkpoints"] if c["step"] == step), None)
    file = cell.path / str(path) / "scores.parquet"
    if path is None or not file.exists():
        return None
    table = pq.read_table(file, columns=["sample_id", "member", "score"], filters=[("attack", "=", attack)])
    found = table.to_pydict()
    return {s: (m, v) for s, m, v in zip(found["sample_id"], found["member"], found["score"], strict=True)}


def scores(out: Path, row: Row) -> dict[str, tuple[bool, float]] | None:
    """sample id → (member, score) of the row's attack at the row's checkpoint (None: not at hand)."""
    return _checkpoint_scores(str(out), row["cell_id"], row["step"], row["attack"])


def aligned(out: Path, picked: Sequence[Row]) -> tuple[np.ndarray, np.ndarray] | None:
    """(member (n,), scores (k, n)) of the rows' checkpoints on their common samples, or None when a
    file is missing or the rows were scored on different samples."""
    loaded = [found for row in picked if (found := scores(out, row)) is not None]
    if len(loaded) < len(picked) or len({frozenset(s) for s in loaded}) != 1:
        return None
    ids = sorted(loaded[0])
    member = np.array([loaded[0][i][0] for i in ids], dtype=bool)
    return member, np.array([[s[i][1] for i in ids] for s in loaded])


def contrast(out: Path, high: Sequence[Row], low: Sequence[Row]) -> tuple[float, float] | None:
    """DeLong difference ``mean AUC(high) - mean AUC(low)`` of rows of one split, and its variance."""
    from privauditor.tasks.stats.significance import delong_covariance

    found = aligned(out, [*high, *low])
    if found is None:
        return None
    member, stacked = found
    weights = np.r_[np.full(len(high), 1 / len(high)), np.full(len(low), -1 / len(low))]
    aucs, covariance = delong_covariance(member, stacked)
    return float(weights @ aucs), float(weights @ covariance @ weights)
