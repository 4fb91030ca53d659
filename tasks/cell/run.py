"""One audit cell end to end, in one process: split → adapt → score → attack → metrics.

:func:`run_cell` writes the design's results-folder contract under ``OUT/cells/<cell_id>/``
(``cell.json``, ``adapter/``, ``signals.parquet``, ``views/``, ``scores.parquet``, ``metrics.json``,
``DONE`` last) and keeps the work cells share under ``OUT/shared/`` (split ids, views of the un-adapted
base such as its signals, neighbour texts), where every later cell of the same (base, dataset, seed)
finds them. A cell with ``DONE`` is not redone; one without is cleared and redone. Every file is written
to a temporary name and renamed.

Training runs once and snapshots the adaptation at every checkpoint of ``train.checkpoints`` (epochs,
fractions of one included, each named by its step); afterwards each snapshot is audited in turn. The last
checkpoint's audit is the cell folder's own files (above); an earlier one's has the same files under
``checkpoints/step-<s>/``. ``cell.json``'s ``checkpoints`` lists
them (epoch, step, ``best`` = lowest validation NLL of the cell, path, utility, adaptation hash, attacks
run). Attacks on the target's stored signals alone (and on views of un-adapted models, computed once per
split) run at every checkpoint (at step 0 a technique that starts as the base reads the base's signals, and
saves no adapter); those that need more passes through the target (neighbours, gradients)
run at the last and the best; one that adapts a model of its own (``spv_mia``) at the last alone.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..infra.deadline import limit
from ..infra.errors import PrivauditorError
from ..infra.faults import in_cell
from ..infra.files import write_json
from ..infra.progress import Progress
from ..infra.provenance import directory_hash, hardware, versions
from ..infra.records import CellOutcome, CheckpointRecord, cell_record, checkpoint_record
from ..infra.results import RESULTS_FORMAT, CellFolder, checkpoint_path
from ..passes.counting import install_from_env
from ..spec.config import CellConfig
from ..spec.resolved import CellSpec, slug
from .attack_job import MapJobs, in_process
from .training import train_cell

log = logging.getLogger(__name__)


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, step: str, work: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return work()
        finally:
            self.seconds[step] = round(self.seconds.get(step, 0.0) + time.perf_counter() - started, 3)


@dataclass(frozen=True)
class CellEnvironment:
    """What the orchestrator lends a cell (the defaults: one process, no limit)."""

    #: ``distributed(spec, workers)`` runs :func:`privauditor.tasks.training.distributed.train_worker` on
    #: ``workers`` ranks (Ray Train, from the orchestrator); cells whose ``train.deepspeed`` is set need it
    distributed: Callable[[dict[str, Any], int], Any] | None = None
    #: ``map_jobs(attack_job, jobs)``: how the attacks run on the stored signals (Ray tasks in a sweep)
    map_jobs: MapJobs = in_process
    #: ``run_view(compute_view, job)`` starts a view that adapts a model of its own (SPV-MIA's reference)
    #: out of the cell's process and returns the wait for it (a Ray task in a sweep; None: in the cell)
    run_view: Callable[[Callable[..., Any], Any], Callable[[], Any]] | None = None
    #: past this many seconds the cell stops with :class:`~privauditor.tasks.infra.deadline.CellTimeout`
    timeout_s: float | None = None
    #: recorded in ``cell.json`` (e.g. the Ray node that ran the cell)
    runtime: dict[str, Any] = field(default_factory=dict)


def run_cell(cell: CellConfig | CellSpec, out: Path, env: CellEnvironment = CellEnvironment()) -> CellOutcome:
    """Run (or find DONE) the cell under the results folder ``out``, without ``DONE`` if it fails or runs
    past ``env.timeout_s``. ``cell`` is a resolved spec, or settings resolved here."""
    install_from_env()  # counts forward passes when $PRIVAUDITOR_COUNT_FORWARD is set (benchmarks)
    out = Path(out)
    spec = cell if isinstance(cell, CellSpec) else cell.resolve()
    cell_id = spec.cell_id()
    folder = CellFolder(out, cell_id)
    if folder.done:
        return folder.outcome(skipped=True)
    if env.distributed is None and spec.train.deepspeed is not None:
        raise PrivauditorError(
            f"{cell_id}: train.deepspeed / train.workers > 1 train under Ray Train: "
            "run the cell with `privauditor cell` or `privauditor run`"
        )
    cell_dir = folder.start()  # an unfinished earlier attempt is cleared
    in_cell(cell_id)
    with limit(env.timeout_s):
        record = execute(spec, cell_id, cell_dir, out / "shared", _Clock(), env)
    record["hardware"] = hardware(record["device"])
    folder.finish(record | {"versions": versions(), "runtime": env.runtime})
    return folder.outcome(skipped=False)


def execute(
    spec: CellSpec, cell_id: str, cell_dir: Path, shared: Path, clock: _Clock, env: CellEnvironment
) -> dict[str, Any]:
    """The cell's work; returns the ``cell.json`` record (spec, provenance, timings, training)."""
    ready = prepare(spec, shared, clock)
    model, loaded, split = ready.model, ready.loaded, ready.split
    snapshots = cell_dir / ".snapshots"
    result, guard = train_cell(spec, model, loaded, split, snapshots, clock, env.distributed)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())  # peft's convention: the adapted model's parameters
    reference = reference_for(spec, loaded, ready.base_identity, spec.technique().trains)
    trained = Trained(
        spec=spec, model=model, loaded=loaded, split=split, checkpoints=result.checkpoints,
        snapshots=snapshots, contexts=ready.contexts, demonstrations=ready.demonstrations,
        epsilon_at=None if guard is None else guard.spent,
    )  # fmt: skip
    audited = audit_checkpoints(trained, cell_dir, shared, reference, clock, env)
    shutil.rmtree(snapshots, ignore_errors=True)
    ran = Ran(result=result, guard=guard, audited=audited, trainable=trainable, total=total)
    return _record(cell_id, trained, ready, ran, shared, clock)


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A cell ready to train: its ``split`` (its ids written once to ``split_file``), the ``loaded`` base
    and the adapted ``model`` on it, the un-adapted base's ``base_identity``, in-context learning's
    ``contexts`` by sample id and record of its ``demonstrations``, and the members' loss ``receipts``
    (None: nothing trains)."""

    split: Any
    split_file: Path
    loaded: Any
    model: Any
    base_identity: Any
    contexts: dict[str, str] | None
    demonstrations: dict[str, Any] | None
    receipts: Any


def prepare(spec: CellSpec, shared: Path, clock: _Clock) -> Prepared:
    """The cell up to its training: the split drawn before the model (bad data fails before any weights
    load) and its ids shared, the base loaded and checked against the technique and its context, the
    technique applied with the cell's seed at its precision, the members' loss receipts."""
    from ..data.splits import draw_split
    from ..datasets import load_dataset
    from ..infra.precision import to_precision
    from ..models import load_model
    from ..passes.scorer import context_tokens, identity_of
    from ..training.loop import apply_seeded
    from ..training.receipts import split_receipts

    technique, precision, max_length = spec.technique(), spec.train.precision, spec.train.max_length
    split = clock("split", lambda: draw_split(load_dataset(spec.dataset), spec.split, spec.seed))
    loaded = clock("load_model", lambda: load_model(spec.model))
    technique.check_family(loaded.family.name)
    virtual = getattr(technique, "virtual_tokens", 0) if technique.prompt_learning else 0
    contexts, demonstrations = technique.contexts(split, spec.seed) if technique.in_context else (None, None)
    check_context(max_length, virtual, loaded, spec.model, context_tokens(contexts, loaded.tokenizer))
    split_file = shared_split(shared, spec, split)
    base_identity = identity_of(loaded.model, loaded.tokenizer, spec.model, spec.base, "none", precision)
    # new weights initialised in float32 whatever the precision, then stored as the precision says
    model = to_precision(apply_seeded(technique, loaded.model, loaded.family, seed=spec.seed), precision)
    # before any training: a member the loss never reaches is a one-line error (receipts.py)
    receipts = split_receipts(split, loaded.tokenizer, max_length, loaded.seq2seq, model, technique.trains)
    return Prepared(
        split=split, split_file=split_file, loaded=loaded, model=model, base_identity=base_identity,
        contexts=contexts, demonstrations=demonstrations, receipts=receipts,
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Ran:
    """What a cell's training and audit gave: the loss record, the defence's guard (None without one), the
    checkpoints' records, and the adapted model's trainable and total parameters."""

    result: Any
    guard: Any
    audited: list[CheckpointRecord]
    trainable: int
    total: int


def _record(
    cell_id: str, trained: Trained, ready: Prepared, ran: Ran, shared: Path, clock: _Clock
) -> dict[str, Any]:
    """The cell's ``cell.json`` record (``hardware``, ``versions`` and ``runtime`` join it in :func:`run_cell`)."""
    spec, split, result, guard = trained.spec, ready.split, ran.result, ran.guard
    return cell_record(
        cell_id=cell_id,
        config=spec.to_dict(),
        provenance={
            "results_format": RESULTS_FORMAT,
            "split": split.hashes(),
            "split_file": str(ready.split_file.relative_to(shared.parent)),
            "adaptation_hash": ran.audited[-1]["adaptation_hash"],
        },
        checkpoints=ran.audited,
        trainable_params=ran.trainable,
        total_params=ran.total,
        train={
            "epochs": result.epochs,
            "lr": result.lr,
            "steps": result.steps,
            "seconds": result.seconds,
            "epoch_losses": result.epoch_losses,
        },
        n_members=len(split.members),
        n_nonmembers=len(split.nonmembers),
        timings=clock.seconds,
        model={
            "name": spec.model,
            "family": ready.loaded.family.name,
            "path_name": Path(ready.loaded.path).name,
        },
        defence={"name": spec.defence} | ({} if guard is None else guard.record(result.steps)),
        device=str(next(trained.model.parameters()).device),
        precision=spec.train.precision,
        loss_receipts=ready.receipts,  # None: nothing trains (none, icl)
        repeats=split.repeats(),
    )


@dataclass(frozen=True, kw_only=True)
class Trained:
    """A trained cell to audit: its spec (whose technique it is) and adapted ``model`` (on ``loaded``'s
    base), its split, the (epoch, step) ``checkpoints`` whose snapshots are in ``snapshots``. In-context
    learning's ``contexts`` by sample id and the record of its ``demonstrations`` (written in place of
    ``adapter/``); ``epsilon_at(step)``: the ε a DP run has spent by that step."""

    spec: CellSpec
    model: Any
    loaded: Any
    split: Any
    checkpoints: list[tuple[float, int]]
    snapshots: Path
    contexts: dict[str, str] | None = None
    demonstrations: dict[str, Any] | None = None
    epsilon_at: Callable[[int], float] | None = None


def audit_checkpoints(
    trained: Trained, cell_dir: Path, shared: Path, reference: Any, clock: _Clock, env: CellEnvironment
) -> list[CheckpointRecord]:
    """Score and attack each checkpoint of ``trained``; returns the ``checkpoints`` records of
    ``cell.json``. Every snapshot's validation NLL comes first: the best one (lowest NLL; the earliest of
    ties) gets the costly attacks too. An attack whose empirical lower bound on ε exceeds what a DP run
    has spent is listed under ``dp_violations`` and logged as a bug."""
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
    return audited


@dataclass(frozen=True, kw_only=True)
class CellAudit:
    """What the audits of a cell's checkpoints share: the trained cell, its folder and the results
    folder's ``shared/``, the reference model, what the orchestrator lends (``env``), how the technique
    adapted (``recipe``), the δ of the empirical ε bound, the split's parts, each snapshot's validation NLL
    by step, and the steps of the best and the last checkpoints."""

    trained: Trained
    cell_dir: Path
    shared: Path
    reference: Any
    clock: _Clock
    env: CellEnvironment
    recipe: Any
    delta: float
    parts: dict[str, Any]
    utilities: dict[int, float]
    best: int
    last: int


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
    found = evaluate(target, cell.parts, attacks, _how(cell, folder, step, stage, earlier))
    spent = None if trained.epsilon_at is None else trained.epsilon_at(step)
    violations = dp_violations(found.metrics, spent)
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


def _how(cell: CellAudit, folder: Path, step: int, stage: Any, earlier: tuple[Any, ...]) -> Any:
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
        elsewhere=elsewhere(env.run_view, spec.model, folder / "adapter") if saved else None,
        delta=cell.delta,
        repeated=split.repeats(),
        earlier=earlier,
        pii=pii_patterns(spec.dataset),
        canaries=(split.canaries, spec.split.canaries) if spec.split.canaries and not trained.contexts else None,
        pii_candidates=spec.score.pii_candidates if step == cell.last else None,
        skipped=stage.skipped,
    )  # fmt: skip


def _delta(spec: CellSpec, split: Any) -> float:
    """The δ of the empirical lower bound on ε: the defence's own, else the default for the records trained."""
    from ..defences import default_delta

    defence = spec.defence_plugin()
    return (defence.delta(spec.defence_params) if defence else None) or default_delta(
        len(split.members) + len(split.known_members)
    )


def _utilities(trained: Trained, clock: _Clock) -> dict[int, float]:
    """Each snapshot's validation NLL per token, by step (in-context learning's read in its contexts)."""
    from ..passes.scorer import Scorer
    from ..training.loop import validation_loss
    from ..training.snapshots import load_snapshot

    spec, model, loaded, split, contexts = (
        trained.spec,
        trained.model,
        trained.loaded,
        trained.split,
        trained.contexts,
    )
    max_length = spec.train.max_length

    def utility() -> float:
        if contexts:  # per token, as validation_loss
            scorer = Scorer(model, loaded.tokenizer, loaded.seq2seq, None, contexts)
            stats = scorer.score(split.validation, max_length, spec.score.batch_size, moments=False)
            return -float(sum(s.logp.sum(dtype="float64") for s in stats)) / max(
                1, sum(len(s.logp) for s in stats)
            )
        return validation_loss(model, loaded.tokenizer, split.validation, max_length, loaded.seq2seq)

    utilities = {}
    for _, step in trained.checkpoints:
        load_snapshot(model, trained.snapshots, step)
        utilities[step] = clock("utility", utility)
    return utilities


def dp_violations(metrics: dict[str, Any], spent: float | None) -> list[str]:
    """The attacks whose empirical lower bound on ε exceeds the ε a DP run claims to have spent: each one is
    a bug in the DP training or its accounting (the bound holds with 95 % confidence), logged loudly."""
    if spent is None:
        return []
    found = sorted(a for a, m in metrics.items() if (m.get("eps_lower") or 0.0) > spent)
    for attack in found:
        log.error(
            "DP VIOLATION: %s's empirical lower bound eps >= %.3f exceeds the %.3f this run claims to have spent",
            attack, metrics[attack]["eps_lower"], spent,
        )  # fmt: skip
    return found


def check_context(max_length: int, virtual: int, loaded: Any, name: str, demonstrations: int = 0) -> None:
    """``train.max_length`` plus ``virtual`` tokens (prompt learning) or the longest prompt of
    ``demonstrations`` tokens (in-context learning) must fit the model's positions."""
    model_config = loaded.model.config
    positions = getattr(model_config, "max_position_embeddings", None) or getattr(
        model_config, "n_positions", None
    )
    if positions is None or loaded.seq2seq:  # T5: relative positions, no hard limit
        return
    if max_length + virtual + demonstrations > positions:
        extra = f" + {virtual} virtual tokens" if virtual else ""
        extra += f" + {demonstrations} tokens of demonstrations (adaptation icl)" if demonstrations else ""
        hint = ": lower icl's demonstrations" if demonstrations else ""
        raise PrivauditorError(
            f"train.max_length {max_length}{extra} exceeds {name}'s context of {positions} positions{hint}"
        )


def reference_for(spec: CellSpec, loaded: Any, base_identity: Any, trains: bool = True) -> Any:
    """The reference model: the un-adapted base unless the spec names one. The base is reloaded (the
    adaptation changed the loaded copy) only if a view that reads it is not stored yet."""
    from ..models import load_model
    from ..passes.scorer import Reference, Scorer, identity_of

    if spec.reference is None:
        if not trains:  # the target's weights are the base's own (none, in-context learning)
            return Reference(
                base_identity, lambda: Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, base_identity)
            )

        def reload() -> Any:
            fresh = load_model(spec.model, precision=spec.train.precision)
            return Scorer(fresh.model, fresh.tokenizer, fresh.seq2seq, base_identity)

        return Reference(base_identity, reload)
    other = load_model(spec.reference, precision=spec.train.precision)
    identity = identity_of(other.model, other.tokenizer, spec.reference, spec.reference_weights, "none")
    scorer = Scorer(other.model, other.tokenizer, other.seq2seq, identity)
    return Reference(identity, lambda: scorer)


def shared_split(shared: Path, spec: CellSpec, split: Any) -> Path:
    """Write the split's ids once under ``shared/splits/`` (what every cell of the split trained on)."""
    hashes = split.hashes()
    path = shared / "splits" / f"{slug(spec.dataset)}__s{spec.seed}__{hashes['split'][:8]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"hashes": hashes, **split.ids()})
    return path
