"""Score a model on members and non-members, compute the views its attacks need, run the attacks.

Shared by a cell (after adaptation) and by ``privauditor audit`` (a model someone else adapted). Writes
``signals.parquet``, ``scores.parquet`` and ``metrics.json`` into ``out_dir``; the un-adapted base's
signals (the reference) and the neighbour texts go to a shared directory, computed once per key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .attack_job import attack_job, in_process
from .attacks import build_attack
from .datasets import Example, content_hash
from .neighbours import cached_neighbours
from .scoring import gradient_norms, mean_nll, score_examples
from .signals import Signals, SignalStore, signal_key, write_json, write_table


@dataclass
class Identity:
    """What a model's signals depend on besides the texts: the store key's model part."""

    model_id: str
    revision: str | None
    adaptation_hash: str  # "none" for an un-adapted model
    tokenizer_id: str
    dtype: str

    def key(self, examples: Sequence[Example], max_length: int) -> dict[str, Any]:
        return signal_key(
            self.model_id,
            self.revision,
            self.adaptation_hash,
            self.tokenizer_id,
            self.dtype,
            max_length,
            content_hash(examples),
        )


@dataclass
class Scorer:
    """A model ready to score, and its identity."""

    model: Any
    tokenizer: Any
    seq2seq: bool
    identity: Identity

    def signals(
        self, examples: Sequence[Example], member: np.ndarray, max_length: int, batch_size: int
    ) -> Signals:
        stats = score_examples(self.model, self.tokenizer, examples, max_length, self.seq2seq, batch_size)
        texts = self.tokenizer.batch_decode([s.token_ids.tolist() for s in stats])  # the target as scored
        return Signals.from_stats([e.sample_id for e in examples], member, stats, texts)


@dataclass
class Reference:
    """The reference model: its identity is known up front, the model is loaded only when its signals
    are not stored yet."""

    identity: Identity
    load: Callable[[], Scorer]


def identity_of(
    model: Any, tokenizer: Any, model_id: str, revision: str | None, adaptation_hash: str
) -> Identity:
    dtype = str(next(model.parameters()).dtype)
    return Identity(model_id, revision, adaptation_hash, f"{tokenizer.name_or_path}:{len(tokenizer)}", dtype)


def evaluate(
    target: Scorer,
    examples: Sequence[Example],
    member: np.ndarray,
    attacks: dict[str, dict[str, Any]],
    out_dir: Path,
    shared: Path,
    reference: Reference | None,
    max_length: int,
    batch_size: int = 16,
    bootstrap: int = 1000,
    seed: int = 0,
    clock: Callable[[str, Callable[[], Any]], Any] = lambda step, work: work(),
    map_jobs: Callable[[Callable[..., Any], list[tuple[Any, ...]]], list[Any]] = in_process,
) -> dict[str, Any]:
    """Run ``attacks`` (name → hyper-parameters) on ``target``; returns metrics by attack.

    Signals (and the views the attacks need) are computed here; the attacks themselves are jobs on the
    stored signals, run through ``map_jobs`` (in this process, or as parallel Ray tasks).

    The reference model is loaded only if its signals are not stored yet (``None``: the reference
    attack is skipped with a note in the metrics).
    """
    store = SignalStore(shared / "signals")
    built = {name: build_attack(name, params) for name, params in attacks.items()}
    needs = {view for attack in built.values() for view in attack.needs}
    key = target.identity.key(examples, max_length)

    def own() -> Signals:
        return target.signals(examples, member, max_length, batch_size)

    # the un-adapted base's signals are the reference's too: share them through the store
    signals = clock(
        "signals",
        lambda: store.get_or_compute(key, own) if target.identity.adaptation_hash == "none" else own(),
    )
    ids = signals.sample_id
    skipped: dict[str, str] = {}
    reference_file = None
    if "reference" in needs:
        if reference is None:
            skipped["reference"] = "no reference model: a full checkpoint needs --reference"
        else:
            reference_key = reference.identity.key(examples, max_length)

            def compute() -> Signals:
                return reference.load().signals(examples, member, max_length, batch_size)

            clock("reference", lambda: store.get_or_compute(reference_key, compute))
            reference_file = str(store.path(reference_key))
    if "neighbours" in needs:
        attack = next(a for a in built.values() if "neighbours" in a.needs)
        signals.neighbour_nll = clock(
            "neighbours",
            lambda: neighbour_nll(
                target, examples, signals, attack.k, attack.mask_fraction, seed, shared, max_length
            ),
        )
    if "gradients" in needs:
        attack = next(a for a in built.values() if "gradients" in a.needs)
        signals.grad_norm = clock(
            "gradients",
            lambda: gradient_norms(
                target.model, target.tokenizer, examples, max_length, target.seq2seq, norm=attack.norm
            ),
        )
    write_table(signals.to_table(), out_dir / "signals.parquet")

    signals_file = str(out_dir / "signals.parquet")
    run = [name for name in built if name not in skipped]
    jobs = [
        (name, attacks[name] or {}, signals_file, reference_file if "reference" in built[name].needs else None,
         bootstrap, seed)
        for name in run
    ]  # fmt: skip
    results = clock("attacks", lambda: map_jobs(attack_job, jobs))
    scores = {name: result[0] for name, result in zip(run, results, strict=True)}
    metrics = {name: {"skipped": reason} for name, reason in skipped.items()}
    metrics |= {name: result[1] for name, result in zip(run, results, strict=True)}
    metrics = {name: metrics[name] for name in built}  # the attacks' order
    write_table(scores_table(ids, signals.member, scores), out_dir / "scores.parquet")
    write_json(out_dir / "metrics.json", metrics)
    return json.loads((out_dir / "metrics.json").read_text())


def neighbour_nll(
    target: Scorer,
    examples: Sequence[Example],
    signals: Signals,
    k: int,
    mask_fraction: float,
    seed: int,
    shared: Path,
    max_length: int,
) -> list[np.ndarray]:
    """The target model's mean NLL on ``k`` neighbours of every scored text (shared neighbour texts)."""
    scored = target.tokenizer.batch_decode([t.tolist() for t in signals.token_ids])
    found = cached_neighbours(shared / "neighbours", signals.sample_id, scored, k, mask_fraction, seed)
    variants = [
        Example(f"{e.sample_id}#{j}", e.prompt, text)
        for e in examples
        for j, text in enumerate(found[e.sample_id])
    ]
    nll = mean_nll(target.model, target.tokenizer, variants, max_length, target.seq2seq)
    return [nll[i * k : (i + 1) * k] for i in range(len(examples))]


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
