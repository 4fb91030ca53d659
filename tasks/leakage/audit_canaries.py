"""Canaries for the one-run DP audit, and the audit itself (:mod:`privauditor.tasks.stats.one_run`).

Each canary is put into the training data by its own fair coin (``split.canaries.inclusion: 0.5``,
drawn from the cell's seed, recorded in the cell, never exported), trained once. Three kinds, ``count`` of
each:

- ``record``: in-distribution, records of the dataset's own pool that no split part holds (the shuffled
  pool's next records past the parts), prompt and target as the dataset renders them;
- ``random``: a prompt of :data:`PREFIX` in-vocabulary tokens drawn uniformly, a target of :data:`SUFFIX`
  more (Panda et al. 2025's random canaries, whose target is a few random tokens after a random prefix);
- ``designed``: the same random prompt; each target token is the in-vocabulary token the un-adapted base
  finds least likely after what precedes it, never one another canary's target holds (Panda et al.'s
  rare-token canaries, built from the base's probabilities instead of new tokens added to the vocabulary,
  which a frozen embedding under LoRA or prompt tuning could not learn).

"In-vocabulary" tokens: every id of the tokenizer that is not special and that decodes and encodes back
to itself alone. A canary's score is its mean target NLL under the un-adapted base (measured before
adaptation) less that under the adapted model: higher, more likely trained on. The base does not depend
on the coins, so the score is a valid test statistic (Panda et al. score the adapted model's loss alone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .canaries import AUDIT_KINDS, Canary

PREFIX, SUFFIX = 16, 2


def vocabulary(tokenizer: Any) -> np.ndarray:
    """The in-vocabulary token ids (module docstring), sorted."""
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    texts = tokenizer.batch_decode([[i] for i in ids])
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return np.array([i for i, back in zip(ids, encoded, strict=True) if back == [i]], dtype=np.int64)


def complete(
    canaries: Sequence[Canary], loaded: Any, base: Any, seed: int, max_length: int
) -> tuple[Canary, ...]:
    """``canaries`` with the random and designed ones written from the un-adapted model in ``loaded`` and
    every audit canary's NLL under ``base`` (its scorer: ``mean_nll``); call before a technique changes it."""
    audit = [c for c in canaries if c.kind in AUDIT_KINDS]
    if not audit:
        return tuple(canaries)
    tokenizer = loaded.tokenizer
    written = {}
    tokens = [c for c in audit if c.kind in ("random", "designed")]
    if tokens:
        ids = vocabulary(tokenizer)
        rng = np.random.default_rng([seed, 7])
        prefixes = {c.example.sample_id: rng.choice(ids, PREFIX).tolist() for c in tokens}
        for kind in ("random", "designed"):
            mine = [c for c in tokens if c.kind == kind]
            targets = (
                [rng.choice(ids, SUFFIX).tolist() for _ in mine] if kind == "random"
                else _least_likely(loaded, [prefixes[c.example.sample_id] for c in mine], ids)
            )  # fmt: skip
            for canary, target in zip(mine, targets, strict=True):
                prompt = tokenizer.decode(prefixes[canary.example.sample_id])
                written[canary.example.sample_id] = (prompt, tokenizer.decode(target))
    examples = {
        c.example.sample_id: dataclasses.replace(c.example, prompt=found[0], target=found[1])
        if (found := written.get(c.example.sample_id)) else c.example
        for c in audit
    }  # fmt: skip
    nll = base.mean_nll(list(examples.values()), max_length)
    by_id = dict(zip(examples, nll.tolist(), strict=True))
    return tuple(
        dataclasses.replace(c, example=examples[c.example.sample_id], base_nll=by_id[c.example.sample_id])
        if c.kind in AUDIT_KINDS else c
        for c in canaries
    )  # fmt: skip


def _least_likely(loaded: Any, prefixes: list[list[int]], ids: np.ndarray) -> list[list[int]]:
    """Per prompt, :data:`SUFFIX` tokens, each the one of ``ids`` the model finds least likely after the
    prompt and the tokens chosen before it, skipping a token an earlier canary's target holds and a pair
    that would not encode back to itself."""
    import torch

    tokenizer, model = loaded.tokenizer, loaded.model
    used: set[int] = set()
    targets = []
    for prefix in prefixes:
        prompt = tokenizer(tokenizer.decode(prefix), add_special_tokens=False)["input_ids"]
        chosen: list[int] = []
        for _ in range(SUFFIX):
            with torch.no_grad():
                logits = _next_logits(model, tokenizer, prompt, chosen, loaded.seq2seq)
            order = ids[np.argsort(logits[ids].float().numpy(), kind="stable")]
            for token in order.tolist():
                if token in used:
                    continue
                trial = [*chosen, token]
                if tokenizer(tokenizer.decode(trial), add_special_tokens=False)["input_ids"] == trial:
                    chosen.append(token)
                    used.add(token)
                    break
        targets.append(chosen)
    return targets


def _next_logits(model: Any, tokenizer: Any, prompt: list[int], chosen: list[int], seq2seq: bool) -> Any:
    """The model's next-token logits after ``prompt`` then ``chosen`` (as training encodes a record)."""
    import torch

    device = next(model.parameters()).device
    if seq2seq:
        encoder = torch.tensor([[*prompt, tokenizer.eos_token_id]], device=device)
        start = model.config.decoder_start_token_id
        decoder = torch.tensor([[start, *chosen]], device=device)
        return model(input_ids=encoder, decoder_input_ids=decoder).logits[0, -1]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    return model(input_ids=torch.tensor([[*bos, *prompt, *chosen]], device=device)).logits[0, -1]


def audit(
    target: Any, canaries: Sequence[Canary], delta: float, max_length: int, batch_size: int,
    scored: dict[str, tuple[Any, Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``extraction.json``'s ``one_run``: per audit kind, the one-run bound over its canaries trained once
    (each kind at α / kinds, so the largest holds at α), and ``eps_lower`` / ``kind``, that largest.
    ``scored``: kinds scored elsewhere (DP's gradient canaries), by name: their scores and coins."""
    from ..stats.one_run import ALPHA, one_run_bound

    scored = scored or {}
    kinds = [k for k in AUDIT_KINDS if any(c.kind == k and c.repeats == 1 for c in canaries)]
    found: dict[str, Any] = {}
    level = ALPHA / (len(kinds) + len(scored))
    for kind, (scores, coins) in scored.items():
        found[kind] = one_run_bound(scores, coins, delta, level)
    for kind in kinds:
        mine = [c for c in canaries if c.kind == kind and c.repeats == 1]
        nll = target.mean_nll([c.example for c in mine], max_length, batch_size)
        scores = np.array([c.base_nll for c in mine], dtype=np.float64) - nll
        found[kind] = one_run_bound(scores, [c.included for c in mine], delta, level)
    top = max(found, key=lambda k: found[k]["eps_lower"]) if found else None
    return {"kinds": found, "kind": top, "eps_lower": found[top]["eps_lower"] if top else None,
            "alpha": ALPHA, "correction": f"Bonferroni over {len(found)} kinds"}  # fmt: skip
