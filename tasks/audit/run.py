"""Audit a model someone already adapted: their members and non-members, every attack, the cell's outputs.

The model is a Hugging Face id or a local checkpoint directory (a full fine-tune), optionally with an
adapter directory on top: a standard peft adapter (``adapter_config.json``) or one saved by a privauditor
cell (``adaptation.json``). The reference model for the ``reference`` attack is ``--reference`` or, with
an adapter, the adapter's base; a full checkpoint without ``--reference`` skips that attack with a note.
Members and non-members are files the dataset loader reads (JSONL / CSV / Parquet with a ``text`` column
or ``prompt`` + ``target``, optional ``id``; ``.txt`` one record per line), checked before anything is
built or loaded (overlap, too few records, near-duplicates: ``audit_inputs.py``). Outputs follow the cell
contract under ``OUT/cells/<audit id>/``, so ``privauditor report OUT`` includes them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cell.plan import Facts, skipped_attacks
from ..cell.run import check_context
from ..data.chat import render, template_of
from ..datasets import content_hash
from ..infra.cache import stable_hash
from ..infra.errors import PrivauditorError
from ..infra.precision import resolve_precision, to_precision
from ..infra.provenance import directory_hash, versions
from ..infra.records import CellOutcome, CheckpointRecord, cell_record, checkpoint_record
from ..infra.results import CellFolder, check_results_dir, claim
from ..passes.adapted import load_adapted, virtual_tokens
from ..spec.config import DEFAULT_ATTACKS, CellConfig
from ..spec.resolved import label, precision_setting, resolve, slug
from .inputs import check_inputs, one_form, read_records

#: an audit's attacks unless ``--set attacks=[...]``: a cell's defaults and the model-free control, which
#: tells a shift between the files from leakage (``verdict.py``)
AUDIT_ATTACKS = (*DEFAULT_ATTACKS, "blind")
#: what an audit records as the writer of its results folder (never a sweep's: ``infra/results.py``)
AUDIT_WRITER = {"kind": "audit"}
#: what ``--set`` may change in an audit (it trains nothing and draws no split)
SETTABLE = ("attacks", "attack_params", "score", "seed", "train.max_length", "train.precision")


def audit_config(model: str, members: str, assignments: list[str]) -> CellConfig:
    """The audit's settings: ``assignments`` may set only what an audit reads (:data:`SETTABLE`)."""
    from ..spec.config import cell_config, parse_assignment

    for text in assignments:
        key = ".".join(parse_assignment(text)[0])
        if not any(key == k or key.startswith(k + ".") for k in SETTABLE):
            raise PrivauditorError(
                f"--set {key}: an audit does not read it (it trains nothing and draws no split); it reads "
                "attacks, attack_params.*, score.*, seed, train.max_length, train.precision"
            )
    settings = {"model": model, "adaptation": "none", "dataset": members, "attacks": list(AUDIT_ATTACKS)}
    return cell_config(settings, assignments)


def file_identity(path: str, records: int) -> dict[str, Any]:
    """A file as a report may name it: sha256 of its bytes, its size and the records read from it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"sha256": digest.hexdigest(), "bytes": Path(path).stat().st_size, "records": records}


@dataclass(frozen=True)
class AuditOptions:
    """How the audited model is obtained and read (``privauditor audit``'s options beyond the files)."""

    adapter: str | None = None  # a peft adapter directory, or a cell's adapter/
    reference: str | None = None  # the reference attack's model (default: the adapter's base)
    revision: str | None = None  # a hub id's branch, tag or commit
    dtype: str | None = None  # the weights as loaded (default float32)
    chat_scored: str = "assistant"  # chat records: the last assistant turn, or "all"
    text_column: str | None = (
        None  # the files' column holding each record's text (else text, prompt + target, ...)
    )
    pii: tuple[tuple[str, str], ...] = ()  # (kind, regular expression) of the PII fields to look for
    render: str | None = None  # "text": every record scored as one whole text, whatever its form
    limit: int | None = None  # only the first N records of each file
    skip_bad: bool = False  # audit the rest of a file some of whose records cannot be read
    baseline: bool = True  # also attack the un-adapted base (the reference) on the same files
    #: audit the model as it ships (tasks/shipping): merged, int8, gguf-q8_0 or gguf-q4
    shipped: str | None = None


def run_audit(
    model: str,
    members: str,
    nonmembers: str,
    out: Path,
    config: CellConfig | None = None,
    options: AuditOptions | None = None,
) -> CellOutcome:
    """Score, attack and measure ``model`` (+ ``options.adapter``) on the given members and non-members."""
    config = config or CellConfig(model=model, adaptation="none", dataset=members)
    options = options or AuditOptions()
    if options.render == "text":  # a chat record rendered whole too, once its template is known
        options = dataclasses.replace(options, chat_scored="all")
    inputs = _identify(AuditFiles(model=model, members=members, nonmembers=nonmembers), config, options)
    out = Path(out)
    folder = CellFolder(out, inputs.audit_id)
    if folder.done:
        return folder.outcome(skipped=True, warnings=tuple(inputs.warnings))
    check_results_dir(out, AUDIT_WRITER)  # before any weights load
    claim(out, AUDIT_WRITER)  # never into a sweep's folder
    target = _load_target(inputs, options)
    cell_dir = folder.start()
    measured = _measure(inputs, target, options, cell_dir, out / "shared")
    folder.finish(_record(inputs, target, measured, options))
    return folder.outcome(skipped=False, warnings=tuple(inputs.warnings))


@dataclass(frozen=True, kw_only=True)
class AuditFiles:
    """What is audited: the model (a hub id or a checkpoint directory) and the members' and non-members'
    files."""

    model: str
    members: str
    nonmembers: str


@dataclass(frozen=True, kw_only=True)
class AuditInputs:
    """An audit's inputs read and identified: the ``files``' records by part (chat records, to render once a
    tokenizer is loaded, in ``chats``), what is weak about them, their content hash (``texts``), the
    resolved spec (at the precision of the weights as loaded), the adapter's hash, the model's spec and the
    audit id."""

    files: AuditFiles
    parts: dict[str, list[Any]]
    chats: dict[str, Any]
    warnings: list[str]
    texts: str
    spec: Any
    adapter_hash: str
    model_spec: Any
    audit_id: str


def _identify(files: AuditFiles, config: CellConfig, options: AuditOptions) -> AuditInputs:
    """The files read and checked, then the audit identified: by the files' content (never their paths),
    the resolved spec, the adapter's hash and the model's spec."""
    from ..models import resolve_model

    parts, chats, warnings = _read_parts(files.members, files.nonmembers, config, options)
    texts = content_hash([*parts["members"], *parts["nonmembers"]])
    # identities (may build what the attacks need, so after the checks); the data is the files' records
    spec = resolve(config, data=f"sha256:{texts}")
    adapter_hash = directory_hash(Path(options.adapter)) if options.adapter else "none"
    if options.shipped:  # another function: scored apart from the unshipped model's
        adapter_hash += f"+shipped:{options.shipped}"
    model_spec = resolve_model(files.model, options.revision, options.dtype)
    # the precision by the weights as loaded (--dtype included), as a cell's (tasks/infra/precision.py)
    precision = resolve_precision(precision_setting(config.train), model_spec.dtype)
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, precision=precision))
    return AuditInputs(
        files=files, parts=parts, chats=chats, warnings=warnings, texts=texts, spec=spec,
        adapter_hash=adapter_hash, model_spec=model_spec,
        audit_id=_audit_id(files.model, spec, adapter_hash, texts, options, bool(chats)),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AuditTarget:
    """The audited model loaded at the audit's precision: its technique's name and trainable parameters,
    the records by part as it reads them (chat records rendered with its template), and the members' loss
    receipts."""

    loaded: Any
    technique: str
    trainable: int
    parts: dict[str, list[Any]]
    receipts: Any
    shipped: dict[str, Any] | None = None  # the shipped form audited (None: the model as loaded)


def _load_target(inputs: AuditInputs, options: AuditOptions) -> AuditTarget:
    """The model (+ adapter) loaded and checked against the records' length."""
    from ..training.receipts import audit_receipts

    loaded, technique, trainable = load_adapted(inputs.model_spec, options.adapter)
    shipped = None
    if options.shipped:
        from .shipped import shipped_model

        loaded, shipped = shipped_model(loaded, technique, options.shipped, inputs.spec.train.precision)
    to_precision(loaded.model, inputs.spec.train.precision)
    max_length = inputs.spec.train.max_length
    check_context(max_length, virtual_tokens(loaded.model), loaded, inputs.files.model)
    parts = inputs.parts
    if inputs.chats:  # rendered with the model's own chat template now that its tokenizer is loaded
        chats = inputs.chats
        parts = {k: [render(e.sample_id, chats[e.sample_id], loaded.tokenizer, options.chat_scored) for e in v]
                 for k, v in parts.items()}  # fmt: skip
    receipts = audit_receipts(parts, loaded.tokenizer, max_length, loaded.seq2seq, loaded.model)
    return AuditTarget(
        loaded=loaded, technique=technique, trainable=trainable, parts=parts, receipts=receipts,
        shipped=shipped,
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What the audit measured: its one checkpoint's record, the reference model's name (None without one),
    the baseline's AUCs by attack (the reference attacked as the target, None when it was not) and when the
    measuring started (``perf_counter``)."""

    checkpoint: CheckpointRecord
    reference: str | None
    baseline: dict[str, float] | None
    started: float


def _measure(
    inputs: AuditInputs, target: AuditTarget, options: AuditOptions, cell_dir: Path, shared: Path
) -> Measured:
    """Score and attack the target (against its reference, where there is one) and its utility, the mean
    NLL on the non-members (held-out text)."""
    from ..cell.evaluate import Evaluate, evaluate
    from ..models import weights_identity
    from ..passes.scorer import Scorer, identity_of
    from ..training.utility import validation_loss

    spec, loaded, parts, model = inputs.spec, target.loaded, target.parts, inputs.files.model
    weights = weights_identity(inputs.model_spec)
    identity = identity_of(loaded.model, loaded.tokenizer, loaded.spec.name, weights, inputs.adapter_hash)
    scorer = Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, identity)
    base_name = options.reference or (model if options.adapter else None)
    ref = _reference(base_name, model, inputs.model_spec, weights, spec.train.precision)
    started = time.perf_counter()
    # an audit's plan: one model, no trajectory, no recipe, a reference only where one is given
    shipped = options.shipped is not None  # merged or quantised: no trained parameters, no gradient
    skipped = skipped_attacks(spec.attacks, Facts(reference=ref is not None, recipe=False, shipped=shipped))
    max_length = spec.train.max_length
    how = Evaluate(
        out_dir=cell_dir, shared=shared, max_length=max_length, reference=ref,
        batch_size=spec.score.batch_size, bootstrap=spec.score.bootstrap, seed=spec.seed,
        pii=dict(options.pii), pii_candidates=spec.score.pii_candidates, skipped=skipped,
    )  # fmt: skip
    found = evaluate(scorer, parts, spec.attacks, how)
    baseline = _baseline(ref, parts, spec.attacks, how) if ref is not None and options.baseline else None
    utility = validation_loss(loaded.model, loaded.tokenizer, parts["nonmembers"], max_length, loaded.seq2seq)
    checkpoint = checkpoint_record(  # one, of unknown training epoch
        epoch=None, step=None, best=None, path=".", utility_loss=utility, adaptation_hash=inputs.adapter_hash,
        attacks=[a.name for a in spec.attacks], views=found.views, extraction=found.extraction,
        **({"shipped": options.shipped} if options.shipped else {}),
    )  # fmt: skip
    return Measured(checkpoint=checkpoint, reference=base_name, baseline=baseline, started=started)


#: where an audit keeps its baseline's outputs (the cell contract's files), inside its own folder
BASELINE = "baseline"


def _baseline(ref: Any, parts: dict[str, list[Any]], attacks: Any, how: Any) -> dict[str, float]:
    """The reference (the un-adapted base, or ``--reference``) attacked as the target on the same files, into
    the audit's ``baseline/`` folder: what the files show before any adaptation. Attacks that read a
    reference (it would be itself) and model-free ones (the same as the audit's) are skipped; the AUC of
    each attack that ran, by name."""
    from ..attacks import ATTACKS
    from ..cell.evaluate import evaluate

    skipped = skipped_attacks(attacks, Facts(reference=False, recipe=False)) | {
        a.name: "model-free: the same as the audit's"
        for a in attacks
        if ATTACKS.get(a.name).access == "model-free"
    }
    how = dataclasses.replace(how, out_dir=how.out_dir / BASELINE, reference=None, skipped=skipped, pii={})
    metrics = evaluate(ref.load(), parts, attacks, how).metrics
    return {name: m["auc"] for name, m in metrics.items() if "auc" in m}


def _record(
    inputs: AuditInputs, target: AuditTarget, measured: Measured, options: AuditOptions
) -> dict[str, Any]:
    """The audit's ``cell.json`` record: the cell's fields, the audited files and model in ``audit``."""
    files, parts = inputs.files, target.parts
    # no split was drawn (the two files are in ``audit``), so none is recorded: ``spec_of`` reads it
    config = {k: v for k, v in inputs.spec.to_dict().items() if k not in ("split", "split_version")}
    return cell_record(
        cell_id=inputs.audit_id,
        config=config
        | {"model": files.model, "adaptation": target.technique, "dataset": Path(files.members).name},
        provenance={"adaptation_hash": inputs.adapter_hash, "texts": inputs.texts},
        checkpoints=[measured.checkpoint],
        trainable_params=target.trainable,
        total_params=sum(p.numel() for p in target.loaded.model.parameters()),
        train={"seconds": 0.0},
        n_members=len(parts["members"]),
        n_nonmembers=len(parts["nonmembers"]),
        timings={"total": round(time.perf_counter() - measured.started, 3)},
        audit=_about(inputs, target, measured, options),
        loss_receipts=target.receipts,  # the members' coverage by a training loss at this max_length
        versions=versions(),
    )


def _read_parts(
    members: str, nonmembers: str, config: CellConfig, options: AuditOptions
) -> tuple[dict[str, list[Any]], dict[str, Any], list[str]]:
    """The two files' records (chat records kept apart, to render once a tokenizer is loaded) and what is
    weak about them; one-line errors for bad PII patterns and for attacks an audit cannot run."""
    from ..attacks import ATTACKS
    from ..leakage.pii import check_patterns

    check_patterns(dict(options.pii))  # a bad pattern is a one-line error before anything loads
    parts, chats = {}, {}
    for part, path in (("members", members), ("nonmembers", nonmembers)):
        parts[part], found = read_records(path, part[0], options.text_column, options.skip_bad)
        parts[part] = parts[part][: options.limit]  # --limit N: the first N records
        chats |= found
    parts = one_form(parts, chats, options.render)
    trajectory = [a for a in config.attacks if ATTACKS.get(a).access == "checkpoints"]
    if trajectory:
        raise PrivauditorError(
            f"attack '{trajectory[0]}' reads a training trajectory (at least 2 checkpoints); an audit has one model"
        )
    attacks = [a for a in config.attacks if ATTACKS.get(a).access != "model-free"]  # the verdict's family
    return parts, chats, check_inputs(parts["members"], parts["nonmembers"], len(attacks))


def _audit_id(
    model: str, spec: Any, adapter_hash: str, texts: str, options: AuditOptions, chats: bool
) -> str:
    """``audit__<model>__<adapter>__<hash>``, identified by the files' content (``texts``), never by their
    paths: the same files audit alike from anywhere."""
    key = [
        label(model),
        adapter_hash,
        options.reference,
        texts,
        spec.to_dict() | {"dataset": None, "model": label(model)},
    ]
    if options.revision or options.dtype or chats:  # what changes the weights or the scored text, when set
        key.append(
            {"revision": options.revision, "dtype": options.dtype}
            | ({"chat_scored": options.chat_scored} if chats else {})
        )
    if not options.baseline:  # what it writes
        key.append({"baseline": False})
    if options.pii:  # what it looks for changes what it writes
        key.append({"pii": [list(field) for field in options.pii]})
    adapter = Path(options.adapter).name if options.adapter else "checkpoint"
    adapter += f"-{options.shipped}" if options.shipped else ""  # (in the key through adapter_hash)
    return "__".join(["audit", slug(label(model)), slug(adapter), stable_hash(key, 8)])


def _reference(
    base_name: str | None, model: str, model_spec: Any, weights: str | None, precision: str
) -> Any:
    """The reference model (the un-adapted base, or ``--reference``), loaded at ``precision``; None
    without one."""
    from ..models import load_model, weights_identity
    from ..passes.scorer import Reference, Scorer, identity_of

    if base_name is None:
        return None
    base = load_model(model_spec if base_name == model else base_name, precision=precision)
    base_weights = weights if base_name == model else weights_identity(base_name)
    identity = identity_of(base.model, base.tokenizer, base.spec.name, base_weights, "none")
    return Reference(identity, lambda: Scorer(base.model, base.tokenizer, base.seq2seq, identity))


def _about(
    inputs: AuditInputs, target: AuditTarget, measured: Measured, options: AuditOptions
) -> dict[str, Any]:
    """``cell.json``'s ``audit``: the model, adapter, reference and files audited, what was weak, the simple
    features that tell the files apart (``features.py``) and the baseline (the reference attacked alone)."""
    from .features import shift_features

    files, parts, base_name = inputs.files, target.parts, measured.reference
    texts = {part: [e.text for e in parts[part]] for part in ("members", "nonmembers")}
    baseline = (
        None
        if measured.baseline is None
        else {"model": base_name, "path": BASELINE, "auc": measured.baseline}
    )
    return {
        "model": files.model,
        "revision": inputs.model_spec.revision,
        "dtype": inputs.model_spec.dtype,
        "adapter": options.adapter,
        "shipped": target.shipped,
        "reference": base_name,
        "members": files.members,
        "nonmembers": files.nonmembers,
        "warnings": inputs.warnings,
        "files": {
            part: file_identity(path, len(parts[part]))
            for part, path in (("members", files.members), ("nonmembers", files.nonmembers))
        },
        "chat": {"template": template_of(target.loaded.tokenizer), "scored": options.chat_scored}
        if inputs.chats
        else None,
        "features": shift_features(texts["members"], texts["nonmembers"]),
        "baseline": baseline,
    }
