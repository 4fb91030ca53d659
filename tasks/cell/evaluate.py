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

from ..attacks import build_attack
from ..datasets import Example
from ..infra.files import read_table, write_json, write_table
from ..leakage.canaries import Canary, CanarySettings, exposures
from ..leakage.extraction import leakage
from ..leakage.pii import inference
from ..passes.scorer import Reference, Scorer
from ..passes.signal_table import Signals
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
    ``pii_candidates``: with ``pii``, infer each field among that many candidates (``pii_inference``)."""

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
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)


def evaluate(
    target: Scorer, parts: dict[str, Sequence[Example]], attacks: Sequence[Any], how: Evaluate
) -> Evaluation:
    """Run ``attacks`` (each with ``name`` and ``params``, e.g. a cell spec's) on ``target``.

    ``parts`` holds the split's ``members`` and ``nonmembers`` (scored) and any ``population`` /
    ``known_members``. Views are computed here, once each; the attacks are jobs on the stored views. The
    attacks in ``how.skipped`` are recorded as skipped with the plan's reason; nothing else is decided here.
    """
    out_dir, reference = how.out_dir, how.reference
    scorers = {"target": lambda: target}
    identities = {"target": target.identity}
    if reference is not None:
        scorers["reference"], identities["reference"] = reference.load, reference.identity
    own = out_dir if how.views_dir is None else how.views_dir
    context = ViewContext(
        scorers=scorers, identities=identities, parts=parts, max_length=how.max_length,
        batch_size=how.batch_size, seed=how.seed, shared=how.shared, own=own, clock=how.clock,
        recipe=how.recipe, elsewhere=how.elsewhere, earlier=how.earlier,
    )  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    signals_file = out_dir / "signals.parquet"
    shutil.copyfile(context.file(build_view("signals")), signals_file)  # the contract's copy, in the cell
    metrics: dict[str, Any] = {}
    runnable = []
    for spec in attacks:  # what cannot run was decided by the plan (cell_plan.skip_reason), not here
        if spec.name in how.skipped:
            metrics[spec.name] = {"skipped": how.skipped[spec.name]}
            continue
        runnable.append((spec, build_attack(spec.name, spec.params).views()))
    for _, views in runnable:
        for view in views.values():
            context.start(view)
    jobs = [
        AttackJob(
            spec.name,
            spec.params,
            str(signals_file),
            {role: str(context.file(v)) for role, v in views.items()},
            how.bootstrap,
            how.seed,
            how.delta,
            dict(how.repeated or {}),
        )  # fmt: skip
        for spec, views in runnable
    ]
    results = how.clock("attacks", lambda: how.map_jobs(attack_job, jobs))
    scores = {
        job.name: result[0] for job, result in zip(jobs, results, strict=True) if "skipped" not in result[1]
    }
    metrics |= {job.name: result[1] for job, result in zip(jobs, results, strict=True)}
    metrics = {spec.name: metrics[spec.name] for spec in attacks}  # the attacks' order
    scored = context.examples()
    member = context.member()
    write_table(scores_table([e.sample_id for e in scored], member, scores), out_dir / "scores.parquet")
    write_json(out_dir / "metrics.json", metrics)
    stored = Signals.from_table(read_table(signals_file))
    extraction = leakage(stored, [e.target for e in scored], target.tokenizer, how.pii)
    if how.pii and how.pii_candidates:
        canaries = how.canaries[0] if how.canaries else ()  # trained too: their values are never decoys
        trained = [*parts.get("known_members", ()), *(c.example for c in canaries if c.included)]
        extraction["pii_inference"] = how.clock("pii inference", lambda: inference(
            target, scored, stored.logp, member, how.pii, how.pii_candidates, how.seed, how.max_length,
            how.batch_size, parts.get("population", ()), trained, how.bootstrap,
        ))  # fmt: skip
    if how.canaries is not None and how.canaries[0]:
        found, settings = how.canaries
        extraction["exposure"] = how.clock(
            "exposure", lambda: exposures(target, found, settings, how.max_length, how.batch_size, how.seed)
        )
    write_json(out_dir / "extraction.json", extraction)
    root = Path(how.shared).parent
    views = {
        job.name: {role: str(Path(f).relative_to(root)) for role, f in job.view_files.items()} for job in jobs
    }
    return Evaluation(
        json.loads((out_dir / "metrics.json").read_text()), views, context.done_elsewhere, extraction
    )


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
