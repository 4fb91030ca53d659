"""Device rates fitted to a finished sweep, and predictions set against measurement.

Every ``cell.json`` holds its seconds per stage (``timings``); :func:`~privauditor.orchestrator.plan.work.cell_work`
gives the same stages in units of work. A stage's seconds are taken as a sum of its units times a rate per
unit (:data:`~privauditor.orchestrator.plan.work.UNITS`), and the rates are fitted by non-negative least squares
over every (cell, stage), each row weighted by the inverse of its seconds (plus half a second), so a short
stage counts as much as a long one in relative terms. A cell's own stages are one row each; a split's shared
stages (computed by whichever of its cells came first) are summed over its cells. Weight bytes are read at
the price table's rate, not fitted: on tiny bases they are the same in every cell.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.results import Results

from .work import SHARED, UNITS, CellWork, cell_work

FITTED = tuple(u for u in UNITS if u != "load_byte")


@dataclass
class Finished:
    spec: Any
    timings: dict[str, float]
    best: int | None  # the index of the best checkpoint (None: a record that does not say)
    cell_id: str
    first: bool  # the first cell its worker process finished (it paid the process's imports and loads)


def finished_cells(results: str | Path, option: str = "") -> list[Finished]:
    """The finished cells of a results folder, with their timings and their best checkpoints (``option``:
    the command-line option that named the folder, for errors)."""
    from privauditor.tasks.infra.results import check_results_format
    from privauditor.tasks.spec.resolved import spec_of

    named = f"{option} {results}".strip()
    if not Path(results).is_dir():
        why = "a file" if Path(results).exists() else "no such folder"
        raise PrivauditorError(f"{named} is not a results folder ({why})")
    check_results_format(Path(results))  # read, never written: no marker is made
    cells, order = [], []
    for cell in Results(results).folders():
        record = cell.record()
        best = next((i for i, c in enumerate(record.get("checkpoints", [])) if c.get("best")), None)
        spec = spec_of(record)
        cells.append(Finished(spec, record.get("timings", {}), best, record["cell_id"], False))
        runtime = record.get("runtime", {})
        order.append((cell.finished(), runtime.get("ray_node_id"), runtime.get("pid")))
    firsts = {}
    for index, (_, *process) in sorted(enumerate(order), key=lambda item: item[1][0]):
        firsts.setdefault(tuple(process), index)
    for index in firsts.values():
        cells[index].first = True
    if not cells:
        raise PrivauditorError(f"{named} holds no finished cells (cells/*/DONE) to fit or compare with")
    return cells


def observations(cells: list[Finished], works: list[CellWork]) -> list[tuple[dict[str, float], float]]:
    """(units, seconds) rows: each cell's own stages, each split's shared stages summed over its cells."""
    rows = []
    shared_units = split_shared(works)
    shared_seconds: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for cell, work in zip(cells, works, strict=True):
        for label, spent in cell.timings.items():
            if label.endswith(SHARED):
                shared_seconds[work.data_key][label] += spent
            elif label in work.own.stages:
                units = dict(work.own.stages[label])
                if label == "load_model" and cell.first:
                    units["process"] = 1.0
                rows.append((units, spent))
    for key, labels in shared_seconds.items():
        for label, spent in labels.items():
            if label in shared_units[key]:
                rows.append((shared_units[key][label], spent))
    return rows


def split_shared(works: list[CellWork]) -> dict[tuple, dict[str, dict[str, float]]]:
    """Each split's shared stages by label, whichever cells did them: a view keyed the same is the same
    work whichever cell names it (a cell names only those it reads: the ``none`` cell its base's, the others
    their reference's), summed over the split's keys (its models' views, its model-free views, its texts)."""
    once: dict[tuple, dict[str, dict[str, float]]] = defaultdict(dict)
    for work in works:
        for key, shared in work.shared.items():
            for label, units in shared.stages.items():
                if sum(units.values()) > sum(once[key].get(label, {}).values()):
                    once[key][label] = dict(units)
    found: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    data_keys = {key: work.data_key for work in works for key in work.shared}
    for key, labels in once.items():
        for label, units in labels.items():
            total = found[data_keys[key]][label]
            for unit, amount in units.items():
                total[unit] = total.get(unit, 0.0) + amount
    return found


def fit(rows: list[tuple[dict[str, float], float]], load_byte: float) -> dict[str, float]:
    """Seconds per unit, non-negative, fitted to ``rows`` in relative terms."""
    from scipy.optimize import nnls

    design = np.array([[units.get(u, 0.0) for u in FITTED] for units, _ in rows], dtype=np.float64)
    target = np.array([spent - units.get("load_byte", 0.0) * load_byte for units, spent in rows])
    weight = 1 / (np.array([spent for _, spent in rows]) + 0.5)
    scale = np.abs(design).max(axis=0)
    scale[scale == 0] = 1.0
    solution, _ = nnls(design / scale * weight[:, None], target * weight)
    return {unit: float(value) for unit, value in zip(FITTED, solution / scale, strict=True)} | {
        "load_byte": load_byte
    }


def best_before_last(cells: list[Finished]) -> float:
    """The share of trajectories (cells with more than one checkpoint) whose best checkpoint was not the
    last: those ran their costly attacks twice."""
    trajectories = [c for c in cells if len(c.spec.train.checkpoints) > 1]
    if not trajectories:
        return 1.0
    earlier = [c.best is not None and c.best < len(c.spec.train.checkpoints) - 1 for c in trajectories]
    return sum(earlier) / len(trajectories)


def calibrate(
    results: str | Path, load_byte: float, shape_of: Any, tokens_of: Any, option: str = ""
) -> dict[str, float]:
    """Rates fitted to a finished sweep's timings, and the share of trajectories whose best checkpoint came
    before the last (``best_before_last``)."""
    cells = finished_cells(results, option)
    works = [cell_work(c.spec, shape_of, tokens_of, c.best) for c in cells]
    return fit(observations(cells, works), load_byte) | {"best_before_last": best_before_last(cells)}


def compare(
    results: str | Path, rates: dict[str, float], shape_of: Any, tokens_of: Any, option: str = ""
) -> dict[str, Any]:
    """A priori predictions (the planner's: which checkpoint will be best is not known; which cell started
    each worker process is taken from the run) against a finished sweep: per cell its own work, per split
    its shared work, and the whole sweep."""
    from .plan import seconds

    cells = finished_cells(results, option)
    p = rates.get("best_before_last", 1.0)
    works = [cell_work(cell.spec, shape_of, tokens_of, best_before_last=p) for cell in cells]
    own, shared_measured = [], defaultdict(float)
    for cell, work in zip(cells, works, strict=True):
        measured = sum(s for label, s in cell.timings.items() if not label.endswith(SHARED))
        predicted = seconds(work.own, rates) + cell.first * rates.get("process", 0.0)
        own.append((cell.cell_id, predicted, measured))
        shared_measured[work.data_key] += sum(
            s for label, s in cell.timings.items() if label.endswith(SHARED)
        )
    predicted = {
        k: sum(seconds(u, rates) for u in labels.values()) for k, labels in split_shared(works).items()
    }
    errors = np.array([p / m - 1 for _, p, m in own if m > 0])
    splits = [(predicted.get(k, 0.0), shared_measured[k]) for k in shared_measured]
    return {
        "cells": own,
        "errors": errors,
        "splits": splits,
        "predicted_s": sum(p for _, p, _ in own) + sum(p for p, _ in splits),
        "measured_s": sum(m for _, _, m in own) + sum(m for _, m in splits),
    }


def error_summary(errors: np.ndarray) -> str:
    """The distribution of relative errors (predicted / measured - 1)."""
    a = np.abs(errors)
    q = np.quantile(errors, [0.1, 0.25, 0.5, 0.75, 0.9])
    return (f"{len(errors)} cells: median |error| {np.median(a):.0%}, mean {a.mean():.0%}, "
            f"{(a <= 0.3).mean():.0%} within 30 %; error quantiles 10/25/50/75/90 %: "
            + " / ".join(f"{x:+.0%}" for x in q))  # fmt: skip
