"""One audit cell end to end, in one process: split → adapt → score → attack → metrics.

:func:`run_cell` writes the design's results-folder contract under ``OUT/cells/<cell_id>/``
(``cell.json``, ``adapter/``, ``signals.parquet``, ``views/``, ``scores.parquet``, ``metrics.json``,
``DONE`` last) and keeps the work cells share under ``OUT/shared/`` (split ids, views of the un-adapted
base such as its signals, neighbour texts), where every later cell of the same (base, dataset, seed)
finds them. A cell with ``DONE`` is not redone; one without is cleared and redone, but for the training
state a drain notice saved (its folder's resume folder, :mod:`privauditor.tasks.training.resume`): the
rerun trains on from that step, and removes it before it finishes. Every file is written to a temporary
name and renamed.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..infra.deadline import limit
from ..infra.errors import PrivauditorError
from ..infra.faults import in_cell
from ..infra.files import write_json
from ..infra.provenance import hardware, versions
from ..infra.records import CellOutcome, CheckpointRecord, cell_record
from ..infra.results import RESULTS_FORMAT, CellFolder
from ..passes.counting import install_from_env
from ..spec.config import CellConfig
from ..spec.resolved import CellSpec, label, slug
from .checkpoints import Trained, audit_checkpoints
from .environment import IN_PROCESS, CellEnvironment, Clock
from .training import train_cell

log = logging.getLogger(__name__)


def run_cell(cell: CellConfig | CellSpec, out: Path, env: CellEnvironment = IN_PROCESS) -> CellOutcome:
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
        record = execute(spec, cell_id, cell_dir, out / "shared", Clock(), env)
    record["hardware"] = hardware(record["device"])
    shutil.rmtree(folder.resume_dir, ignore_errors=True)  # a preempted attempt's state, now spent
    folder.finish(record | {"versions": versions(), "runtime": env.runtime})
    return folder.outcome(skipped=False)


def execute(
    spec: CellSpec, cell_id: str, cell_dir: Path, shared: Path, clock: Clock, env: CellEnvironment
) -> dict[str, Any]:
    """The cell's work; returns the ``cell.json`` record (spec, provenance, timings, training)."""
    ready = prepare(spec, shared, clock)
    model, loaded, split = ready.model, ready.loaded, ready.split
    snapshots = cell_dir / ".snapshots"
    resume = resume_folder(spec, cell_id, cell_dir, snapshots)
    result, guard = train_cell(spec, model, loaded, split, snapshots, clock, env.distributed, resume)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())  # peft's convention: the adapted model's parameters
    reference = reference_for(spec, loaded, ready.base_identity, spec.technique().trains)
    trained = Trained(
        spec=spec, model=model, loaded=loaded, split=split, checkpoints=result.checkpoints,
        snapshots=snapshots, contexts=ready.contexts, demonstrations=ready.demonstrations,
        epsilon_at=None if guard is None else guard.spent,
        gradient_canaries=None if guard is None else guard.canaries(),
    )  # fmt: skip
    audited, shipped = audit_checkpoints(trained, cell_dir, shared, reference, clock, env)
    shutil.rmtree(snapshots, ignore_errors=True)
    ran = Ran(result=result, guard=guard, audited=audited, shipped=shipped, trainable=trainable, total=total)
    return _record(cell_id, trained, ready, ran, shared, clock)


def resume_folder(spec: CellSpec, cell_id: str, cell_dir: Path, snapshots: Path) -> Any:
    """The cell's step state after a preemption: in its folder's resume folder, which starting the cell
    again keeps (:meth:`~privauditor.tasks.infra.results.CellFolder.start`), keyed by the cell id and the
    hash of its whole spec."""
    from ..infra.cache import stable_hash
    from ..training.resume import ResumeFolder

    key = {"cell_id": cell_id, "spec": stable_hash(spec.to_dict(), 16)}
    return ResumeFolder(CellFolder.at(cell_dir).resume_dir, key, snapshots)


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


def prepare(spec: CellSpec, shared: Path, clock: Clock) -> Prepared:
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
    if spec.split.canaries is not None and spec.split.canaries.audits:  # built and scored on the base
        split = clock("canaries", lambda: with_audit_canaries(split, loaded, spec.seed, max_length))
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
    checkpoints' records and the last one's shipped forms', and the adapted model's trainable and total
    parameters."""

    result: Any
    guard: Any
    audited: list[CheckpointRecord]
    shipped: list[dict[str, Any]]
    trainable: int
    total: int


def _record(
    cell_id: str, trained: Trained, ready: Prepared, ran: Ran, shared: Path, clock: Clock
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
        resumed_from_step=getattr(result, "resumed_from_step", None),
        preemptions=getattr(result, "preemptions", 0),
        **({"shipped": ran.shipped} if ran.shipped else {}),
    )


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


def with_audit_canaries(split: Any, loaded: Any, seed: int, max_length: int) -> Any:
    """``split`` with its audit canaries written and their base NLLs measured (tasks/leakage/audit_canaries.py)."""
    import dataclasses

    from ..leakage.audit_canaries import complete
    from ..passes.scorer import Scorer, identity_of

    identity = identity_of(loaded.model, loaded.tokenizer, "base", None, "none")
    base = Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, identity)
    return dataclasses.replace(split, canaries=complete(split.canaries, loaded, base, seed, max_length))


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
    path = shared / "splits" / f"{slug(label(spec.dataset))}__s{spec.seed}__{hashes['split'][:8]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"hashes": hashes, **split.ids()})
    return path
