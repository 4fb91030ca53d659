"""Score a model's members and non-members, compute the views its attacks read, run the attacks.

Shared by a cell (after adaptation) and by ``privauditor audit`` (a model someone else adapted). Writes
``signals.parquet`` (the target's signals, the design's contract), ``scores.parquet`` and
``metrics.json`` into ``out_dir``; every view goes to the store its key says (see
:mod:`privauditor.tasks.views._base`): the cell's ``views/``, or ``shared/views/`` for views of
un-adapted models, which cells of the same split share.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..datasets import Example
from ..infra.files import read_table, write_json, write_table
from ..leakage.audit_canaries import audit
from ..leakage.canaries import KINDS, Canary, CanarySettings, exposures
from ..leakage.extraction import leakage
from ..leakage.pii import inference
from ..passes.scorer import Reference, Scorer
from ..passes.signal_table import Signals
from ..spec.resolved import AttackSpec
from ..views import build_view
from ..views._base import Checkpoint, Recipe, ViewContext
from .attack_job import AttackJob, MapJobs, attack_job, in_process


@dataclass(frozen=True, kw_only=True)
class Evaluate:
    """Where and how :func:`evaluate` works. ``shared``: the results folder's ``shared/`` (views of
    un-adapted models); views of the adapted model are kept under ``views_dir`` (default ``out_dir``): a
    cell keeps every checkpoint's there, apart by their adaptation hash. ``reference``: the reference
    model, None when there is none (an attack that reads it is skipped with a note). ``recipe``: how the
    target was adapted, for views that adapt a model of their own the same way (a cell knows it; an audit
    of someone else's model not); ``elsewhere`` starts such views out of this process
    (:class:`ViewContext`), before any other view is computed here, so the two overlap. ``map_jobs`` runs
    the attack jobs (in this process, or as parallel Ray tasks). ``delta`` and ``repeated`` add the
    empirical ε bound and the duplication metrics (:class:`~privauditor.tasks.cell.attack_job.AttackJob`).
    ``earlier``: the target's earlier checkpoints in a cell (what an attack of a trajectory reads).
    ``pii``: the dataset's declared PII fields, whose reconstruction rates join the extraction rates.
    ``skipped``: the attacks that cannot run (name -> why), as the plan decided
    (:func:`~privauditor.tasks.cell.plan.skip_reason`): they are recorded as skipped and read nothing.
    ``canaries``: the split's canaries and their settings, whose exposures join them too;
    ``pii_candidates``: with ``pii``, infer each field among that many candidates (``pii_inference``);
    ``one_run``: audit the canaries made for it (one pre-registered checkpoint: a cell's last), at ``delta``,
    with a DP run's ``gradient_canaries`` (scores, coins) beside them."""

    out_dir: Path
    shared: Path
    max_length: int
    reference: Reference | None = None
    batch_size: int = 16
    bootstrap: int = 1000
    seed: int = 0
    clock: Callable[[str, Callable[[], Any]], Any] = lambda step, work: work()
    map_jobs: MapJobs = in_process
    views_dir: Path | None = None
    recipe: Recipe | None = None
    elsewhere: Callable[[Any, ViewContext], Callable[[], Any]] | None = None
    delta: float | None = None
    repeated: Mapping[str, int] | None = None
    earlier: tuple[Checkpoint, ...] = ()
    pii: Mapping[str, str] | None = None
    canaries: tuple[tuple[Canary, ...], CanarySettings] | None = None
    pii_candidates: int | None = None
    one_run: bool = False
    gradient_canaries: tuple[Any, Any] | None = None
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)


def evaluate(
    target: Scorer, parts: dict[str, Sequence[Example]], attacks: Sequence[AttackSpec], how: Evaluate
) -> Evaluation:
    """Run ``attacks`` (a spec's) on ``target``.

    ``parts`` holds the split's ``members`` and ``nonmembers`` (scored) and any ``population`` /
    ``known_members``. Views are computed here, once each; the attacks are jobs on the stored views. The
    attacks in ``how.skipped`` are recorded as skipped with the plan's reason; nothing else is decided here.
    """
    out_dir = how.out_dir
    context = _context(target, parts, how)
    out_dir.mkdir(parents=True, exist_ok=True)
    signals_file = out_dir / "signals.parquet"
    shutil.copyfile(context.file(build_view("signals")), signals_file)  # the contract's copy, in the cell
    skipped = {a.name: {"skipped": how.skipped[a.name]} for a in attacks if a.name in how.skipped}
    jobs = _jobs([a for a in attacks if a.name not in how.skipped], context, signals_file, how)
    results = how.clock("attacks", lambda: how.map_jobs(attack_job, jobs))
    scores = {
        job.name: result[0] for job, result in zip(jobs, results, strict=True) if "skipped" not in result[1]
    }
    metrics = skipped | {job.name: result[1] for job, result in zip(jobs, results, strict=True)}
    metrics = {spec.name: metrics[spec.name] for spec in attacks}  # the attacks' order
    scored = context.examples()
    member = context.member()
    write_table(scores_table([e.sample_id for e in scored], member, scores), out_dir / "scores.parquet")
    write_json(out_dir / "metrics.json", metrics)
    extraction = _extraction(
        target, parts, Scored(examples=scored, member=member, signals_file=signals_file), how
    )
    write_json(out_dir / "extraction.json", extraction)
    root = Path(how.shared).parent
    views = {
        job.name: {role: str(Path(f).relative_to(root)) for role, f in job.view_files.items()} for job in jobs
    }
    return Evaluation(
        json.loads((out_dir / "metrics.json").read_text()), views, context.done_elsewhere, extraction
    )


def _context(target: Scorer, parts: dict[str, Sequence[Example]], how: Evaluate) -> ViewContext:
    """Where the views of ``target`` (and of ``how.reference``, where there is one) are computed and kept."""
    scorers: dict[str, Callable[[], Scorer]] = {"target": lambda: target}
    identities = {"target": target.identity}
    if how.reference is not None:
        scorers["reference"], identities["reference"] = how.reference.load, how.reference.identity
    own = how.out_dir if how.views_dir is None else how.views_dir
    return ViewContext(
        scorers=scorers, identities=identities, parts=parts, max_length=how.max_length,
        batch_size=how.batch_size, seed=how.seed, shared=how.shared, own=own, clock=how.clock,
        recipe=how.recipe, elsewhere=how.elsewhere, earlier=how.earlier,
    )  # fmt: skip


def _jobs(
    runnable: Sequence[AttackSpec], context: ViewContext, signals_file: Path, how: Evaluate
) -> list[AttackJob]:
    """One job per attack that runs, on its views' stored files: the views computed out of this process
    are started first, so they overlap the ones computed here (in the attacks' order)."""
    views = [attack.plugin().views() for attack in runnable]
    for found in views:
        for view in found.values():
            context.start(view)
    return [
        AttackJob(
            name=attack.name,
            params=attack.params,
            signals_file=str(signals_file),
            view_files={role: str(context.file(v)) for role, v in found.items()},
            bootstrap=how.bootstrap,
            seed=how.seed,
            delta=how.delta,
            repeated=dict(how.repeated or {}),
        )
        for attack, found in zip(runnable, views, strict=True)
    ]


@dataclass(frozen=True, kw_only=True)
class Scored:
    """The texts scored, in the stored order, whether each is a member, and the target's stored signals."""

    examples: list[Example]
    member: np.ndarray
    signals_file: Path


def _extraction(
    target: Scorer, parts: dict[str, Sequence[Example]], scored: Scored, how: Evaluate
) -> dict[str, Any]:
    """The extraction rates of the target's stored signals, with PII inference (``how.pii_candidates``)
    and the canaries' exposures where they are asked for."""
    stored = Signals.from_table(read_table(scored.signals_file))
    extraction = leakage(stored, [e.target for e in scored.examples], target.tokenizer, how.pii)
    if how.pii and how.pii_candidates:
        canaries = how.canaries[0] if how.canaries else ()  # trained too: their values are never decoys
        trained = [*parts.get("known_members", ()), *(c.example for c in canaries if c.included)]
        extraction["pii_inference"] = how.clock("pii inference", lambda: inference(
            target, scored.examples, stored.logp, scored.member, how.pii, how.pii_candidates, seed=how.seed,
            max_length=how.max_length, batch_size=how.batch_size, population=parts.get("population", ()),
            trained=trained, resamples=how.bootstrap,
        ))  # fmt: skip
    found, settings = how.canaries or ((), None)
    accounts = [c for c in found if c.kind in KINDS]
    if accounts and settings is not None:
        extraction["exposure"] = how.clock(
            "exposure",
            lambda: exposures(target, accounts, settings, how.max_length, how.batch_size, how.seed),
        )
    text = settings is not None and settings.audits
    if how.one_run and (text or how.gradient_canaries is not None) and how.delta is not None:
        delta, mine = how.delta, found if text else ()
        extra = {} if how.gradient_canaries is None else {"gradient": how.gradient_canaries}
        extraction["one_run"] = how.clock(
            "one-run audit", lambda: audit(target, mine, delta, how.max_length, how.batch_size, extra)
        )
    return extraction


@dataclass
class Evaluation:
    """What :func:`evaluate` found: metrics by attack, the view files each attack read (by role, relative
    to the results folder), what the views computed out of this process reported, by label, and the
    extraction rates (also in ``extraction.json``)."""

    metrics: dict[str, Any]
    views: dict[str, dict[str, str]]
    elsewhere: dict[str, Any]
    extraction: dict[str, Any]


def scores_table(sample_ids: list[str], member: np.ndarray, scores: dict[str, np.ndarray]) -> pa.Table:
    """``scores.parquet``: one row per (sample, attack)."""
    n = len(sample_ids)
    return pa.table(
        {
            "sample_id": pa.array(sample_ids * len(scores), pa.string()),
            "member": pa.array(np.tile(member, len(scores)), pa.bool_()),
            "attack": pa.array([a for a in scores for _ in range(n)], pa.string()),
            "score": pa.array(np.concatenate([scores[a] for a in scores]) if scores else [], pa.float64()),
        }
    )


def read_scores(folder: Path, attack: str) -> tuple[np.ndarray, np.ndarray]:
    """(member, score) of ``attack`` in ``folder/scores.parquet``, ordered by sample id (two scorings of
    the same records line up)."""
    table = read_table(Path(folder) / "scores.parquet").to_pylist()
    chosen = sorted((r["sample_id"], r["member"], r["score"]) for r in table if r["attack"] == attack)
    return np.array([c[1] for c in chosen], bool), np.array([c[2] for c in chosen], float)
