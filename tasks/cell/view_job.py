"""A view of a cell's adapted model computed in another process: what that process needs, and its work.

A view that adapts a model of its own (``View.adapts``: SPV-MIA's self-prompt reference) costs an
adaptation, so a sweep runs it as a Ray task of its own (the orchestrator's ``run_view``), side by side
with the cell's other views. The task rebuilds the target from the base and the adaptation the cell has
just saved, and computes the view into the same store, under the same key and lock, as the cell would.
Nothing here imports Ray.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..passes.scorer import ModelIdentity
from ..views._base import PART_MEMBERS, Recipe, View, ViewContext


@dataclass(frozen=True)
class ViewJob:
    """All one view of a cell's adapted model needs, picklable."""

    view: View
    model: str  # the base, as ``load_model`` takes it
    adapter: str  # the folder the cell saved the adaptation to
    identities: dict[str, ModelIdentity]
    parts: dict[str, Sequence[Any]]
    max_length: int
    batch_size: int
    seed: int
    shared: str
    own: str
    recipe: Recipe


def compute_view(job: ViewJob) -> dict[str, Any]:
    """Rebuild the target and store ``job.view``; returns where and how long (seconds) it ran."""
    from ..passes.adapted import load_adapted
    from ..passes.counting import install_from_env
    from ..passes.scorer import Scorer

    install_from_env()  # its passes are counted as the cell's are (benchmarks)
    started = time.perf_counter()
    loaded, _, _ = load_adapted(job.model, job.adapter)
    target = Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, job.identities["target"])
    context = ViewContext(
        scorers={"target": lambda: target}, identities=job.identities, parts=job.parts,
        max_length=job.max_length, batch_size=job.batch_size, seed=job.seed, shared=Path(job.shared),
        own=Path(job.own), recipe=job.recipe,
    )  # fmt: skip
    context.file(job.view)
    return {"pid": os.getpid(), "seconds": round(time.perf_counter() - started, 3)}


def elsewhere(
    run: Callable[[Callable[[ViewJob], Any], ViewJob], Callable[[], Any]], model: str, adapter: Path
) -> Callable[[View, ViewContext], Callable[[], Any]]:
    """A ``ViewContext.elsewhere`` that hands each view to ``run(compute_view, job)`` (which starts it and
    returns the wait), the target rebuilt from the base ``model`` and the saved ``adapter``."""

    def start(view: View, context: ViewContext) -> Callable[[], Any]:
        job = ViewJob(
            view, model, str(adapter), {"target": context.identities["target"]},
            {part: context.parts[part] for part in PART_MEMBERS if part in context.parts},
            context.max_length, context.batch_size, context.seed, str(context.shared), str(context.own),
            context.recipe,
        )  # fmt: skip
        return run(compute_view, job)

    return start
