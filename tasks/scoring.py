"""Scoring: one batched forward pass per text, reduced to per-token statistics (never the T x V matrix).

For every example the scored positions are its target tokens conditioned on its prompt (the design's
rule, the same for every family and technique): a causal model reads ``<s> prompt target`` and the
logits one step before each target token are used; virtual tokens that prompt tuning / P-tuning put in
front of the input are sliced off (their number is the logits' length minus the input's); prefix
tuning's key/values never appear as positions. T5 is scored on its decoder labels.

Per token it keeps ``logp`` (log p of the actual token), and ``mu`` / ``sigma``, the mean and standard
deviation of log p over the vocabulary under p (what Min-K%++ normalises by). Right padding with an
attention mask gives the same numbers as scoring one text at a time (a test checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .datasets import Example
from .deadline import check
from .training import collate, encode


@dataclass
class TokenStats:
    """One scored text: its target token ids and per-token statistics (float32)."""

    token_ids: np.ndarray
    logp: np.ndarray
    mu: np.ndarray | None = None
    sigma: np.ndarray | None = None

    @property
    def nll(self) -> float:
        """Mean per-token negative log-likelihood (nats)."""
        return float(-self.logp.mean()) if len(self.logp) else float("nan")


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _stats(rows: torch.Tensor, tokens: torch.Tensor, moments: bool) -> tuple[torch.Tensor, ...]:
    """log p of ``tokens`` under the logits ``rows`` (N x V), and optionally mu and sigma of log p."""
    logprobs = torch.log_softmax(rows.float(), dim=-1)
    logp = logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    if not moments:
        return (logp,)
    probs = logprobs.exp()
    mu = (probs * logprobs).sum(-1)
    second = (probs * logprobs.square()).sum(-1)
    return logp, mu, (second - mu.square()).clamp_min(0.0).sqrt()


@torch.inference_mode()
def score_examples(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    batch_size: int = 16,
    moments: bool = True,
    chunk_rows: int = 4096,
) -> list[TokenStats]:
    """Per-token statistics of ``model`` on every example's target tokens, in input order.

    ``moments=False`` skips ``mu``/``sigma`` (neighbour texts need only the log-likelihood);
    ``chunk_rows`` bounds how many positions' full-vocabulary log-softmax exist at once.
    """
    model.eval()
    data = encode(tokenizer, examples, max_length, seq2seq)
    device = _device(model)
    out: list[TokenStats] = []
    for start in range(0, len(data), batch_size):
        check("scoring")
        batch = collate(data[start : start + batch_size], tokenizer.pad_token_id, seq2seq)
        labels = batch["labels"]
        batch = {k: v.to(device) for k, v in batch.items()}
        if seq2seq:
            logits = model(**batch).logits  # decoder positions, aligned with labels
            aligned, label_ids = logits, labels
        else:
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
            logits = model(**inputs).logits
            logits = logits[:, logits.shape[1] - labels.shape[1] :]  # drop virtual tokens
            aligned, label_ids = logits[:, :-1], labels[:, 1:]  # position t predicts token t + 1
        mask = label_ids != -100
        rows = aligned[mask.to(device)]
        tokens = label_ids[mask].to(device)
        pieces = [
            _stats(rows[i : i + chunk_rows], tokens[i : i + chunk_rows], moments)
            for i in range(0, len(tokens), chunk_rows)
        ]
        columns = [torch.cat(parts).cpu().numpy().astype(np.float32) for parts in zip(*pieces, strict=True)]
        lengths = mask.sum(1).tolist()
        offset = 0
        for row, n in enumerate(lengths):
            cut = slice(offset, offset + n)
            ids = label_ids[row][mask[row]].numpy().astype(np.int32)
            stats = [c[cut] for c in columns]
            out.append(TokenStats(ids, *stats) if moments else TokenStats(ids, stats[0]))
            offset += n
    return out


def mean_nll(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    batch_size: int = 32,
) -> np.ndarray:
    """Mean per-token NLL of every example's target (no vocabulary moments): float64 array."""
    scored = score_examples(model, tokenizer, examples, max_length, seq2seq, batch_size, moments=False)
    return np.array([s.nll for s in scored], dtype=np.float64)


def gradient_norms(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    norm: float = 2.0,
) -> np.ndarray:
    """Per example, the ``norm``-norm of the gradient of its mean target NLL w.r.t. the trainable
    parameters, taken as one vector; a model with none trainable (``none``) uses all its parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    frozen = not params
    if frozen:
        params = list(model.parameters())
        for p in params:
            p.requires_grad_(True)
    model.eval()
    device = _device(model)
    norms = []
    try:
        for item in encode(tokenizer, examples, max_length, seq2seq):
            check("gradients")
            batch = {k: v.to(device) for k, v in collate([item], tokenizer.pad_token_id, seq2seq).items()}
            grads = torch.autograd.grad(model(**batch).loss, params, allow_unused=True)
            flat = torch.cat([g.detach().float().flatten() for g in grads if g is not None])
            norms.append(float(torch.linalg.vector_norm(flat, ord=norm)))
    finally:
        if frozen:
            for p in params:
                p.requires_grad_(False)
    return np.array(norms, dtype=np.float64)
