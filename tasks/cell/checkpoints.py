"""A cell's trained snapshots audited in turn: each checkpoint's views and attacks, its utility (mean
validation NLL), its adaptation hash and, under DP, the attacks whose empirical lower bound on epsilon
exceeds what was spent; and the clock that times a cell's steps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..infra.progress import Progress
from ..infra.provenance import directory_hash
from ..infra.records import CheckpointRecord, checkpoint_record
from ..infra.results import checkpoint_path
from ..spec.resolved import CellSpec
from .audit_settings import CellAudit, how_at, model_utility
from .environment import CellEnvironment, Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Trained:
    """A trained cell to audit: its spec (whose technique it is) and adapted ``model`` (on ``loaded``'s
    base), its split, the (epoch, step) ``checkpoints`` whose snapshots are in ``snapshots``. In-context
    learning's ``contexts`` by sample id and the record of its ``demonstrations`` (written in place of
    ``adapter/``); ``epsilon_at(step)``: the ε a DP run has spent by that step; ``gradient_canaries``: the
    scores and coins of a DP run's gradient canaries (audited with the text kinds at the last checkpoint)."""

    spec: CellSpec
    model: Any
    loaded: Any
    split: Any
    checkpoints: list[tuple[float, int]]
    snapshots: Path
    contexts: dict[str, str] | None = None
    demonstrations: dict[str, Any] | None = None
    epsilon_at: Callable[[int], float] | None = None
    gradient_canaries: Any = None


def audit_checkpoints(
    trained: Trained, cell_dir: Path, shared: Path, reference: Any, clock: Clock, env: CellEnvironment
) -> tuple[list[CheckpointRecord], list[dict[str, Any]]]:
    """Score and attack each checkpoint of ``trained``, then the last one's shipped forms; returns the
    ``checkpoints`` and ``shipped`` records of ``cell.json`` (:mod:`.shipped`). Every snapshot's
    validation NLL comes first: the best one (lowest NLL; the earliest of ties) gets the costly attacks
    too. At the last, a canary kind whose one-run lower bound on ε exceeds what a DP run has spent is
    listed under ``dp_violations`` and logged as a bug."""
    from ..views._base import Recipe
    from .plan import plan_cell

    spec, split, checkpoints = trained.spec, trained.split, trained.checkpoints
    recipe = Recipe(spec.model, spec.adaptation, spec.adaptation_params, spec.train.lr, spec.train.batch_size)
    delta = _delta(spec, split)
    utilities = _utilities(trained, clock)
    best = min(utilities, key=lambda s: (utilities[s], s))
    steps = [step for _, step in checkpoints]
    plan = plan_cell(spec, best=steps.index(best))
    cell = CellAudit(
        trained=trained, cell_dir=cell_dir, shared=shared, reference=reference, clock=clock, env=env,
        recipe=recipe, delta=delta, utilities=utilities, best=best, last=checkpoints[-1][1],
        parts={part: getattr(split, part) for part in ("members", "nonmembers", "population", "known_members")},
    )  # fmt: skip
    audited: list[CheckpointRecord] = []
    earlier: list[Any] = []
    shown = Progress(
        f"auditing {len(checkpoints)} checkpoints ({len(spec.attacks)} attacks)", len(checkpoints)
    )
    for (epoch, step), stage in zip(checkpoints, plan.checkpoints, strict=True):
        record, checkpoint = _audit_checkpoint(cell, epoch, step, stage, tuple(earlier))
        audited.append(record)
        earlier.append(checkpoint)
        shown.update(1, epoch=epoch)
    shown.close()
    if not spec.score.shipped:
        return audited, []
    from .shipped import audit_shipped

    last_hash = audited[-1]["adaptation_hash"]
    return audited, audit_shipped(cell, plan.checkpoints[-1], tuple(earlier[:-1]), last_hash)


def _audit_checkpoint(
    cell: CellAudit, epoch: float, step: int, stage: Any, earlier: tuple[Any, ...]
) -> tuple[CheckpointRecord, Any]:
    """Score and attack the checkpoint at ``step`` as its ``stage`` of the plan says, after the ``earlier``
    ones; its ``checkpoints`` record, and the checkpoint as the later ones read it."""
    from ..passes.scorer import Scorer, identity_of
    from ..training.snapshots import load_snapshot
    from ..views._base import Checkpoint
    from .evaluate import evaluate

    trained, spec = cell.trained, cell.trained.spec
    model, loaded = trained.model, trained.loaded
    load_snapshot(model, trained.snapshots, step)
    folder = cell.cell_dir if step == cell.last else cell.cell_dir / checkpoint_path(step)
    attacks = [a for a in spec.attacks if a.name in stage.runs]
    adaptation_hash = _adaptation_hash(cell, folder, stage.saves)
    identity = identity_of(model, loaded.tokenizer, spec.model, spec.base, adaptation_hash)
    target = Scorer(model, loaded.tokenizer, loaded.seq2seq, identity, trained.contexts)
    found = evaluate(target, cell.parts, attacks, how_at(cell, folder, step, stage, earlier))
    spent = None if trained.epsilon_at is None else trained.epsilon_at(step)
    violations = dp_violations(found.extraction.get("one_run"), spent)
    record = checkpoint_record(
        epoch=epoch,
        step=step,
        best=step == cell.best,
        path=str(folder.relative_to(cell.cell_dir)),
        utility_loss=cell.utilities[step],
        adaptation_hash=adaptation_hash,
        attacks=[a.name for a in attacks],
        views=found.views,
        extraction=found.extraction,
        **({} if spent is None else {"epsilon": spent, "dp_violations": violations}),
        **({"elsewhere": found.elsewhere} if found.elsewhere else {}),
    )  # fmt: skip
    return record, Checkpoint(step, adaptation_hash, folder / "signals.parquet")


def _adaptation_hash(cell: CellAudit, folder: Path, saves: bool) -> str:
    """The checkpoint's adaptation written to ``folder`` (in-context learning's demonstrations, or the
    adapter where the plan saves one) and its hash. Untrained, a technique that starts as the base is the
    base's function (the stage's ``as_base``): it saves nothing, and attacks that read only signals take
    the base's, which the split shares."""
    from ..adaptations.icl import write_demonstrations

    trained = cell.trained
    if trained.demonstrations is not None:
        return write_demonstrations(trained.demonstrations, folder)
    if not saves:
        return "none"
    cell.clock("save", lambda: trained.spec.technique().save(trained.model, folder / "adapter"))
    return directory_hash(folder / "adapter")


def _delta(spec: CellSpec, split: Any) -> float:
    """The δ of the empirical lower bound on ε: the defence's own, else the default for the records trained."""
    from ..defences import default_delta

    defence = spec.defence_plugin()
    return (defence.delta(spec.defence_params) if defence else None) or default_delta(
        len(split.members) + len(split.known_members)
    )


def _utilities(trained: Trained, clock: Clock) -> dict[int, float]:
    """Each snapshot's validation NLL per token, by step (in-context learning's read in its contexts)."""
    from ..training.snapshots import load_snapshot

    utilities = {}
    for _, step in trained.checkpoints:
        load_snapshot(trained.model, trained.snapshots, step)
        utilities[step] = clock("utility", lambda: model_utility(trained, trained.model))
    return utilities


def dp_violations(one_run: dict[str, Any] | None, spent: float | None) -> list[str]:
    """The canary kinds whose one-run lower bound on ε (tasks/stats/one_run.py) exceeds the ε a DP run
    claims to have spent: each is a bug in the DP training or its accounting (the largest over the kinds
    holds with 95 % confidence), logged loudly. The attacks' own bounds (tasks/stats/lower_bound.py) are a
    heuristic over a fixed-size split and never flag one."""
    if spent is None or not one_run:
        return []
    found = sorted(k for k, b in one_run["kinds"].items() if b["eps_lower"] > spent)
    for kind in found:
        log.error(
            "DP VIOLATION: the one-run bound over the %s canaries, eps >= %.3f, exceeds the %.3f this run "
            "claims to have spent", kind, one_run["kinds"][kind]["eps_lower"], spent,
        )  # fmt: skip
    return found
