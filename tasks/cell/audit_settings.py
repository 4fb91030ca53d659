"""What the audits of a cell's checkpoints (:mod:`.checkpoints`) and of its shipped forms (:mod:`.shipped`)
share: the cell being audited, how :func:`~privauditor.tasks.cell.evaluate.evaluate` works at one of its
checkpoints, and a model's validation NLL on its split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .environment import CellEnvironment, Clock


@dataclass(frozen=True, kw_only=True)
class CellAudit:
    """What the audits of a cell's checkpoints share: the trained cell, its folder and the results
    folder's ``shared/``, the reference model, what the orchestrator lends (``env``), how the technique
    adapted (``recipe``), the δ of the empirical ε bound, the split's parts, each snapshot's validation NLL
    by step, and the steps of the best and the last checkpoints."""

    trained: Any  # a checkpoints.Trained
    cell_dir: Path
    shared: Path
    reference: Any
    clock: Clock
    env: CellEnvironment
    recipe: Any
    delta: float
    parts: dict[str, Any]
    utilities: dict[int, float]
    best: int
    last: int


def how_at(cell: CellAudit, folder: Path, step: int, stage: Any, earlier: tuple[Any, ...]) -> Any:
    """How :func:`~privauditor.tasks.cell.evaluate.evaluate` works at the checkpoint at ``step``: its
    views kept in the cell's folder, a view that adapts a model of its own started out of the process
    where the cell lends one (``env.run_view``) and the adapter is saved, PII inference at the last."""
    from ..datasets import pii_patterns
    from .evaluate import Evaluate
    from .view_job import elsewhere

    trained, env = cell.trained, cell.env
    spec, split = trained.spec, trained.split
    saved = env.run_view is not None and spec.technique().trains and trained.demonstrations is None
    return Evaluate(
        out_dir=folder, shared=cell.shared, max_length=spec.train.max_length, reference=cell.reference,
        batch_size=spec.score.batch_size, bootstrap=spec.score.bootstrap, seed=spec.seed,
        clock=cell.clock, map_jobs=env.map_jobs, views_dir=cell.cell_dir, recipe=cell.recipe,
        elsewhere=elsewhere(env.run_view, spec.model, folder / "adapter") if saved and env.run_view else None,
        delta=cell.delta,
        repeated=split.repeats(),
        earlier=earlier,
        pii=pii_patterns(spec.dataset),
        canaries=(split.canaries, spec.split.canaries) if spec.split.canaries and not trained.contexts else None,
        pii_candidates=spec.score.pii_candidates if step == cell.last else None,
        one_run=step == cell.last,
        gradient_canaries=trained.gradient_canaries if step == cell.last else None,
        skipped=stage.skipped,
    )  # fmt: skip


def model_utility(trained: Any, model: Any) -> float:
    """``model``'s validation NLL per token on ``trained``'s split (in-context learning's read in its
    contexts): the trained model at a checkpoint, or a shipped form of it."""
    from ..passes.scorer import Scorer
    from ..training.utility import validation_loss

    spec, loaded, split, contexts = trained.spec, trained.loaded, trained.split, trained.contexts
    max_length = spec.train.max_length
    if contexts:  # per token, as validation_loss
        scorer = Scorer(model, loaded.tokenizer, loaded.seq2seq, None, contexts)  # type: ignore[arg-type]  # no view stored: no identity
        stats = scorer.score(split.validation, max_length, spec.score.batch_size, moments=False)
        return -float(sum(s.logp.sum(dtype="float64") for s in stats)) / max(
            1, sum(len(s.logp) for s in stats)
        )
    return validation_loss(model, loaded.tokenizer, split.validation, max_length, loaded.seq2seq)
