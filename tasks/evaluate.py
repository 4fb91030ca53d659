"""Score a model's members and non-members, compute the views its attacks read, run the attacks.

Shared by a cell (after adaptation) and by ``privauditor audit`` (a model someone else adapted). Writes
``signals.parquet`` (the target's signals, the design's contract), ``scores.parquet`` and
``metrics.json`` into ``out_dir``; every view goes to the store its key says (see
:mod:`privauditor.tasks.views._base`): the cell's ``views/``, or ``shared/views/`` for views of
un-adapted models, which cells of the same split share.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .attack_job import attack_job, in_process
from .attacks import build_attack
from .datasets import Example
from .files import write_json, write_table
from .signals import Signals
from .views import build_view
from .views._base import ModelIdentity, Recipe, ViewContext

if TYPE_CHECKING:
    from .scoring import TokenStats


@dataclass
class Scorer:
    """A model ready to score, and its identity. ``contexts`` (in-context learning) maps each sample id
    to the text the model reads in front of that sample's prompt: its demonstrations."""

    model: Any
    tokenizer: Any
    seq2seq: bool
    identity: ModelIdentity
    contexts: Mapping[str, str] | None = None

    def context_of(self, sample_id: str) -> str:
        """The context ``sample_id`` is read in ("" without in-context learning); a variant of a sample
        (``<id>#<j>``, e.g. a neighbour text) is read in its sample's."""
        if not self.contexts:
            return ""
        found = self.contexts.get(sample_id)
        return self.contexts[sample_id.rsplit("#", 1)[0]] if found is None else found

    @property
    def context_tokens(self) -> int:
        """Positions the longest context takes (0 without in-context learning)."""
        return context_tokens(self.contexts, self.tokenizer)

    def score(
        self,
        examples: Sequence[Example],
        max_length: int,
        batch_size: int = 16,
        moments: bool = True,
        prefixes: Sequence[str] | None = None,
    ) -> list[TokenStats]:
        """Per-token statistics of every example's target, each read in its context, after its
        ``prefixes`` entry when given (the scored positions stay the example's own)."""
        from .scoring import score_examples, score_in_context

        if not self.contexts and prefixes is None:
            return score_examples(
                self.model, self.tokenizer, examples, max_length, self.seq2seq, batch_size, moments
            )
        prefixes = prefixes or [""] * len(examples)
        before = [self.context_of(e.sample_id) + p for e, p in zip(examples, prefixes, strict=True)]
        return score_in_context(
            self.model, self.tokenizer, examples, before, max_length, self.seq2seq, batch_size, moments
        )

    def mean_nll(self, examples: Sequence[Example], max_length: int, batch_size: int = 32) -> np.ndarray:
        """Mean per-token NLL of every example's target, read in its context: float64 array."""
        stats = self.score(examples, max_length, batch_size, moments=False)
        return np.array([s.nll for s in stats], dtype=np.float64)

    def signals(
        self, examples: Sequence[Example], member: np.ndarray, max_length: int, batch_size: int
    ) -> Signals:
        stats = self.score(examples, max_length, batch_size)
        texts = self.tokenizer.batch_decode([s.token_ids.tolist() for s in stats])  # the target as scored
        return Signals.from_stats([e.sample_id for e in examples], member, stats, texts)


def context_tokens(contexts: Mapping[str, str] | None, tokenizer: Any) -> int:
    """Tokens of the longest in-context prompt (0 without in-context learning)."""
    if not contexts:
        return 0
    texts = sorted(set(contexts.values()))
    return max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])


@dataclass
class Reference:
    """The reference model: its identity is known up front, the model is loaded only when a view that
    reads it is not stored yet."""

    identity: ModelIdentity
    load: Callable[[], Scorer]


def identity_of(
    model: Any, tokenizer: Any, name: str, weights: str | None, adaptation_hash: str
) -> ModelIdentity:
    dtype = str(next(model.parameters()).dtype)
    return ModelIdentity(name, weights, adaptation_hash, f"{tokenizer.name_or_path}:{len(tokenizer)}", dtype)


def evaluate(
    target: Scorer,
    parts: dict[str, Sequence[Example]],
    attacks: Sequence[Any],
    out_dir: Path,
    shared: Path,
    reference: Reference | None,
    max_length: int,
    batch_size: int = 16,
    bootstrap: int = 1000,
    seed: int = 0,
    clock: Callable[[str, Callable[[], Any]], Any] = lambda step, work: work(),
    map_jobs: Callable[[Callable[..., Any], list[tuple[Any, ...]]], list[Any]] = in_process,
    views_dir: Path | None = None,
    recipe: Recipe | None = None,
    elsewhere: Callable[[Any, ViewContext], Callable[[], Any]] | None = None,
    delta: float | None = None,
    repeated: Mapping[str, int] | None = None,
) -> Evaluation:
    """Run ``attacks`` (each with ``name`` and ``params``, e.g. a cell spec's) on ``target``.

    ``parts`` holds the split's ``members`` and ``nonmembers`` (scored) and any ``population`` /
    ``known_members``. Views are computed here, once each; the attacks are jobs on the stored views, run
    through ``map_jobs`` (in this process, or as parallel Ray tasks). An attack that reads the reference
    model is skipped with a note when there is none (a full checkpoint audited without ``--reference``).
    Views of the adapted model are kept under ``views_dir`` (default ``out_dir``): a cell keeps every
    checkpoint's there, apart by their adaptation hash. ``recipe``: how the target was adapted, for views
    that adapt a model of their own the same way (a cell knows it; an audit of someone else's model not);
    ``elsewhere`` starts such views out of this process (:class:`ViewContext`), before any other view is
    computed here, so the two overlap. ``delta`` and ``repeated`` add the empirical ε bound and the
    duplication metrics (:func:`~privauditor.tasks.attack_job.attack_job`).
    """
    scorers = {"target": lambda: target}
    identities = {"target": target.identity}
    if reference is not None:
        scorers["reference"], identities["reference"] = reference.load, reference.identity
    own = out_dir if views_dir is None else views_dir
    context = ViewContext(
        scorers, identities, parts, max_length, batch_size, seed, shared, own, clock, recipe, elsewhere
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    signals_file = out_dir / "signals.parquet"
    shutil.copyfile(context.file(build_view("signals")), signals_file)  # the contract's copy, in the cell
    metrics: dict[str, Any] = {}
    runnable = []
    for spec in attacks:
        attack = build_attack(spec.name, spec.params)
        views = attack.views()
        missing = [role for role, view in views.items() if not set(view.models()) <= set(identities)]
        if missing:
            metrics[spec.name] = {"skipped": "no reference model: a full checkpoint needs --reference"}
            continue
        if not all(context.available(view) for view in views.values()):
            metrics[spec.name] = {"skipped": "needs how the target was adapted: only a cell knows it"}
            continue
        if target.contexts and not all(v.in_context for v in views.values() if "target" in v.models()):
            metrics[spec.name] = {"skipped": "not defined for in-context learning"}
            continue
        runnable.append((spec, views))
    for _, views in runnable:
        for view in views.values():
            context.start(view)
    jobs = []
    for spec, views in runnable:
        files = {role: str(context.file(view)) for role, view in views.items()}
        jobs.append(
            (spec.name, spec.params, str(signals_file), files, bootstrap, seed, delta, dict(repeated or {}))
        )
    results = clock("attacks", lambda: map_jobs(attack_job, jobs))
    scores = {job[0]: result[0] for job, result in zip(jobs, results, strict=True)}
    metrics |= {job[0]: result[1] for job, result in zip(jobs, results, strict=True)}
    metrics = {spec.name: metrics[spec.name] for spec in attacks}  # the attacks' order
    scored = context.examples()
    member = context.member()
    write_table(scores_table([e.sample_id for e in scored], member, scores), out_dir / "scores.parquet")
    write_json(out_dir / "metrics.json", metrics)
    root = Path(shared).parent
    views = {job[0]: {role: str(Path(f).relative_to(root)) for role, f in job[3].items()} for job in jobs}
    return Evaluation(json.loads((out_dir / "metrics.json").read_text()), views, context.done_elsewhere)


@dataclass
class Evaluation:
    """What :func:`evaluate` found: metrics by attack, the view files each attack read (by role, relative
    to the results folder), and what the views computed out of this process reported, by label."""

    metrics: dict[str, Any]
    views: dict[str, dict[str, str]]
    elsewhere: dict[str, Any]


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
