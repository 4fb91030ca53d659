"""Expanding a model × adaptation × dataset × seed (× defence) matrix into cells, dropping what cannot run.

A (family, technique) pair the family does not support is dropped from a matrix expansion and listed
with its reason (``privauditor validate`` prints them); asked for explicitly, the same pair is an error.
So is a (model, technique) pair a defence cannot train (DP-SGD: a technique that trains nothing, a model
that trains under DeepSpeed): its defended cells are dropped, its undefended ones kept.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from privauditor.tasks.adaptations import ADAPTATIONS
from privauditor.tasks.datasets import DATASETS
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.models import resolve_model


@dataclass(frozen=True)
class Cell:
    """One (model, adaptation, dataset, seed) of a sweep."""

    model: str
    adaptation: str
    dataset: str
    seed: int


@dataclass(frozen=True)
class Dropped:
    """A matrix entry left out, and why."""

    model: str
    adaptation: str
    reason: str


def expand(
    models: list[str], adaptations: list[str], datasets: list[str], seeds: list[int]
) -> tuple[list[Cell], list[Dropped]]:
    """Every supported combination, in matrix order, plus the (model, adaptation) pairs dropped."""
    families = {m: resolve_model(m).family for m in models}
    techniques = {a: ADAPTATIONS.get(a)() for a in adaptations}
    for name in datasets:  # unknown names fail here, before any work starts
        if name not in DATASETS and "/" not in name and "." not in name:
            DATASETS.get(name)
    cells, dropped = [], []
    for model, adaptation in itertools.product(models, adaptations):
        reason = techniques[adaptation].unsupported_reason(families[model])
        if reason:
            dropped.append(Dropped(model, adaptation, reason))
            continue
        cells += [Cell(model, adaptation, d, s) for d, s in itertools.product(datasets, seeds)]
    return cells, dropped


def defence_reason(model: str, adaptation: str, defence: str) -> str | None:
    """Why ``defence`` cannot train (model, adaptation) (None: it can, or there is no defence)."""
    from privauditor.tasks.defences import get_defence

    plugin = get_defence(defence)
    if plugin is None:
        return None
    stage = resolve_model(model).resources.zero_stage
    return plugin.unsupported_reason(ADAPTATIONS.get(adaptation)(), 1, stage)


def check_cell(model: str, adaptation: str) -> None:
    """An explicitly requested pair must be supported: raise a one-line error otherwise."""
    reason = ADAPTATIONS.get(adaptation)().unsupported_reason(resolve_model(model).family)
    if reason:
        raise PrivauditorError(f"cannot run {model} × {adaptation}: {reason}")
