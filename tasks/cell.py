"""One audit cell end to end, in one process: split → adapt → score → attack → metrics.

:func:`run_cell` writes the design's results-folder contract under ``OUT/cells/<cell_id>/``
(``cell.json``, ``adapter/``, ``signals.parquet``, ``scores.parquet``, ``metrics.json``, ``DONE`` last)
and keeps the work cells share under ``OUT/shared/`` (split ids, the un-adapted base's signals, neighbour
texts), where every later cell of the same (base, dataset, seed) finds them. A cell with ``DONE`` is
not redone; one without is cleared and redone. Every file is written to a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .attack_job import in_process
from .config import CellConfig, slug
from .counting import install_from_env
from .datasets import Example
from .deadline import limit, remaining
from .errors import PrivauditorError
from .faults import in_cell
from .signals import write_json

RESULTS_FORMAT = 1
PACKAGES = ("privauditor", "torch", "transformers", "peft", "datasets", "numpy", "pyarrow", "scikit-learn")


@dataclass
class CellOutcome:
    cell_id: str
    path: Path
    metrics: dict[str, Any]
    skipped: bool  # already DONE before this call


def check_results_dir(out: Path) -> None:
    """Create ``out/privauditor.json`` or check it: a folder of another results format is refused."""
    marker = out / "privauditor.json"
    if marker.exists():
        try:
            found = json.loads(marker.read_text()).get("results_format")
        except (json.JSONDecodeError, AttributeError):
            found = "unreadable"
        if found != RESULTS_FORMAT:
            raise PrivauditorError(
                f"{out} holds results format {found!r}, this privauditor writes {RESULTS_FORMAT}: "
                "use another --out folder"
            )
        return
    if out.exists() and not out.is_dir():
        raise PrivauditorError(f"results folder {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(marker, {"results_format": RESULTS_FORMAT})
    except OSError as exc:
        raise PrivauditorError(f"cannot write results to {out}: {exc.strerror or exc}") from None


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def directory_hash(path: Path) -> str:
    """sha256 over the names and bytes of the files under ``path`` (the adaptation's content hash)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\x00" + file.read_bytes())
    return digest.hexdigest()


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

    #: ``distributed(spec, workers)`` runs :func:`privauditor.tasks.distributed.train_worker` on
    #: ``workers`` ranks (Ray Train, from the orchestrator); cells whose ``train.deepspeed`` is set need it
    distributed: Callable[[dict[str, Any], int], Any] | None = None
    #: ``map_jobs(attack_job, jobs)``: how the attacks run on the stored signals (Ray tasks in a sweep)
    map_jobs: Callable[[Callable[..., Any], list[tuple[Any, ...]]], list[Any]] = in_process
    #: past this many seconds the cell stops with :class:`~privauditor.tasks.deadline.CellTimeout`
    timeout_s: float | None = None
    #: recorded in ``cell.json`` (e.g. the Ray node that ran the cell)
    runtime: dict[str, Any] = field(default_factory=dict)


def run_cell(config: CellConfig, out: Path, env: CellEnvironment = CellEnvironment()) -> CellOutcome:
    """Run (or find DONE) the cell ``config`` under the results folder ``out``, without ``DONE`` if it
    fails or runs past ``env.timeout_s``."""
    install_from_env()  # counts forward passes when $PRIVAUDITOR_COUNT_FORWARD is set (benchmarks)
    out = Path(out)
    cell_id = config.cell_id()
    cell_dir = out / "cells" / cell_id
    if (cell_dir / "DONE").exists():
        return CellOutcome(cell_id, cell_dir, json.loads((cell_dir / "metrics.json").read_text()), True)
    if env.distributed is None and config.resolved()["train"]["deepspeed"] is not None:
        raise PrivauditorError(
            f"{cell_id}: train.deepspeed / train.workers > 1 train under Ray Train: "
            "run the cell with `privauditor cell` or `privauditor run`"
        )
    check_results_dir(out)
    shutil.rmtree(cell_dir, ignore_errors=True)  # an unfinished earlier attempt
    cell_dir.mkdir(parents=True)
    in_cell(cell_id)
    with limit(env.timeout_s):
        record = execute(config, cell_id, cell_dir, out / "shared", _Clock(), env)
    write_json(cell_dir / "cell.json", record | {"versions": versions(), "runtime": env.runtime})
    write_json(
        cell_dir / "DONE",
        {"cell_id": cell_id, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    )
    return CellOutcome(cell_id, cell_dir, json.loads((cell_dir / "metrics.json").read_text()), False)


def execute(
    config: CellConfig, cell_id: str, cell_dir: Path, shared: Path, clock: _Clock, env: CellEnvironment
) -> dict[str, Any]:
    """The cell's work; returns the ``cell.json`` record (config, provenance, timings, training)."""
    from .adaptations import build_adaptation
    from .datasets import load_dataset
    from .evaluate import Scorer, evaluate, identity_of
    from .models import load_model
    from .splits import draw_split
    from .training import apply_seeded, train, train_config_of, validation_loss

    resolved = config.resolved()
    technique = build_adaptation(config.adaptation, resolved["adaptation_params"])
    size = config.split
    split = clock(  # before the model: bad data fails before any weights load
        "split",
        lambda: draw_split(
            load_dataset(config.dataset), size.members, size.nonmembers, size.validation, config.seed
        ),
    )
    loaded = clock("load_model", lambda: load_model(config.model))
    technique.check_family(loaded.family.name)
    virtual = getattr(technique, "virtual_tokens", 0) if technique.prompt_learning else 0
    check_context(config.train.max_length, virtual, loaded, config.model)
    split_file = shared_split(shared, config, split)
    model_id = Path(loaded.path).name if loaded.spec.source == "tiny" else loaded.spec.name
    base_identity = identity_of(loaded.model, loaded.tokenizer, model_id, loaded.spec.revision, "none")
    model = apply_seeded(technique, loaded.model, loaded.family, seed=config.seed)
    train_config = train_config_of(config)
    if resolved["train"]["deepspeed"] is None:
        result = clock(
            "train", lambda: train(model, loaded.tokenizer, split.members, train_config, loaded.seq2seq)
        )
    else:
        result = clock("train", lambda: train_elsewhere(config, model, cell_dir / ".train", env.distributed))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    adaptation_hash = "none"
    if config.adaptation != "none":
        clock("save", lambda: technique.save(model, cell_dir / "adapter"))
        adaptation_hash = directory_hash(cell_dir / "adapter")
    max_length = config.train.max_length
    utility = clock(
        "utility",
        lambda: validation_loss(model, loaded.tokenizer, split.validation, max_length, loaded.seq2seq),
    )
    target = Scorer(
        model,
        loaded.tokenizer,
        loaded.seq2seq,
        identity_of(model, loaded.tokenizer, model_id, loaded.spec.revision, adaptation_hash),
    )
    reference = reference_for(config, loaded, base_identity)
    examples, member = scored_examples(split)
    evaluate(
        target,
        examples,
        member,
        {name: resolved["attack_params"][name] for name in config.attacks},
        cell_dir,
        shared,
        reference,
        max_length,
        config.score.batch_size,
        config.score.bootstrap,
        config.seed,
        clock,
        env.map_jobs,
    )
    return {
        "cell_id": cell_id,
        "config": resolved,
        "model": {"name": config.model, "family": loaded.family.name, "path_name": model_id},
        "provenance": {
            "results_format": RESULTS_FORMAT,
            "split": split.hashes(),
            "split_file": str(split_file.relative_to(shared.parent)),
            "adaptation_hash": adaptation_hash,
        },
        "trainable_params": trainable,
        "train": {
            "epochs": result.epochs,
            "lr": result.lr,
            "steps": result.steps,
            "seconds": result.seconds,
            "epoch_losses": result.epoch_losses,
        },
        "utility_loss": utility,
        "device": str(next(model.parameters()).device),
        "n_members": len(split.members),
        "n_nonmembers": len(split.nonmembers),
        "timings": clock.seconds,
    }


def check_context(max_length: int, virtual: int, loaded: Any, name: str) -> None:
    """``train.max_length`` plus ``virtual`` tokens (prompt learning) must fit the model's positions."""
    model_config = loaded.model.config
    positions = getattr(model_config, "max_position_embeddings", None) or getattr(
        model_config, "n_positions", None
    )
    if positions is None or loaded.seq2seq:  # T5: relative positions, no hard limit
        return
    if max_length + virtual > positions:
        extra = f" + {virtual} virtual tokens" if virtual else ""
        raise PrivauditorError(
            f"train.max_length {max_length}{extra} exceeds {name}'s context of {positions} positions"
        )


def train_elsewhere(config: CellConfig, model: Any, workdir: Path, distributed: Any) -> Any:
    """Train on ``train.workers`` ranks under DeepSpeed and load the result into ``model``."""
    from .distributed import load_trained

    spec = {"cell": config.to_dict(), "workdir": str(workdir), "timeout_s": remaining()}
    distributed(spec, config.resolved()["train"]["workers"])
    result = load_trained(model, workdir)
    shutil.rmtree(workdir)
    return result


def reference_for(config: CellConfig, loaded: Any, base_identity: Any) -> Any:
    """The reference model: the un-adapted base unless the config names one. The base is reloaded (the
    adaptation changed the loaded copy) only if its signals are not in the shared store yet."""
    from .evaluate import Reference, Scorer, identity_of
    from .models import load_model

    if config.reference is None:
        if config.adaptation == "none":  # the target is the base itself
            return Reference(
                base_identity, lambda: Scorer(loaded.model, loaded.tokenizer, loaded.seq2seq, base_identity)
            )

        def reload() -> Any:
            fresh = load_model(config.model)
            return Scorer(fresh.model, fresh.tokenizer, fresh.seq2seq, base_identity)

        return Reference(base_identity, reload)
    other = load_model(config.reference)
    spec = other.spec
    name = Path(other.path).name if spec.source == "tiny" else spec.name
    scorer = Scorer(
        other.model,
        other.tokenizer,
        other.seq2seq,
        identity_of(other.model, other.tokenizer, name, spec.revision, "none"),
    )
    return Reference(scorer.identity, lambda: scorer)


def split_record(split: Any) -> dict[str, Any]:
    return {
        part: [e.sample_id for e in getattr(split, part)] for part in ("members", "nonmembers", "validation")
    }


def shared_split(shared: Path, config: CellConfig, split: Any) -> Path:
    """Write the split's ids once under ``shared/splits/`` (what every cell of the split trained on)."""
    hashes = split.hashes()
    path = shared / "splits" / f"{slug(config.dataset)}__s{config.seed}__{hashes['split'][:8]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"hashes": hashes, **split_record(split)})
    return path


def scored_examples(split: Any) -> tuple[list[Example], np.ndarray]:
    examples = list(split.members) + list(split.nonmembers)
    member = np.r_[np.ones(len(split.members), bool), np.zeros(len(split.nonmembers), bool)]
    return examples, member
