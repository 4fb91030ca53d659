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

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .datasets import Example
from .deadline import check
from .progress import Progress
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
    weighted = logprobs.exp().mul_(logprobs)  # p log p, in place: one N x V buffer besides log p
    mu = weighted.sum(-1)
    second = torch.linalg.vecdot(weighted, logprobs)  # sum of p (log p)^2, no N x V temporary
    return logp, mu, (second - mu.square()).clamp_min(0.0).sqrt()


CHUNK_ELEMENTS = 1 << 24  # logits of one chunk of scored positions (64 MB in float32)
# On a CPU the statistics read and write N x V buffers several times: in pieces of 2 MB they stay in
# cache (measured at 32k vocabulary: 512 rows at once 0.17 s, in 16-row pieces 0.04 s), while the
# projection keeps its large chunks, where the matrix product is most efficient.
STATS_ELEMENTS = 1 << 19


class TargetHead:
    """The model's output projection applied only at the scored positions, a chunk at a time.

    A forward pre-hook on the output embeddings takes the final hidden states (B x T x H) and keeps
    the rows at the target positions (virtual tokens in front, the prompt and padding dropped); the
    projection itself gets an empty sequence, so the model's forward makes no logits. :meth:`project`
    then applies the projection to ``chunk`` kept rows: no B x T x V tensor ever exists.
    """

    def __init__(self, model: Any) -> None:
        self.module = model.get_output_embeddings()
        self.rows: torch.Tensor | None = None

    @contextmanager
    def at(self, mask: torch.Tensor, shift: bool) -> Iterator[None]:
        def take(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            hidden = args[0]
            hidden = hidden[:, hidden.shape[1] - mask.shape[1] - int(shift) :]  # drop virtual tokens
            self.rows = (hidden[:, :-1] if shift else hidden)[mask]
            return (hidden[:, :0], *args[1:])

        handle = self.module.register_forward_pre_hook(take)
        try:
            yield
        finally:
            handle.remove()

    def project(self, start: int, chunk: int) -> torch.Tensor:
        assert self.rows is not None, "run the model inside at() first"
        return self.module(self.rows[start : start + chunk])


@torch.inference_mode()
def score_examples(  # noqa: PLR0913  # the scoring kernel: a model, its texts and plain numbers, as numpy's kernels take them
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    batch_size: int = 16,
    moments: bool = True,
    chunk_rows: int | None = None,
) -> list[TokenStats]:
    """Per-token statistics of ``model`` on every example's target tokens, in input order (batches
    are formed from texts of similar length, which right padding makes give the same numbers).

    ``moments=False`` skips ``mu``/``sigma`` (neighbour texts need only the log-likelihood);
    ``chunk_rows`` bounds how many positions' full-vocabulary log-softmax exist at once (default: as
    many as keep one chunk's logits near 16 M numbers, so memory does not grow with the vocabulary).
    """
    model.eval()
    data = encode(tokenizer, examples, max_length, seq2seq)
    # length-bucketed batches: texts of similar length together, so little of a batch is padding
    order = sorted(range(len(data)), key=lambda i: (len(data[i]["input_ids"]), len(data[i]["labels"])))
    device = _device(model)
    out: list[TokenStats | None] = [None] * len(data)
    head = TargetHead(model)
    vocab = head.module.weight.shape[0]
    chunk_rows = chunk_rows or max(1, CHUNK_ELEMENTS // vocab)
    # on an accelerator the whole chunk at once: there, many small pieces would cost kernel launches
    stats_rows = max(1, min(chunk_rows, STATS_ELEMENTS // vocab)) if device.type == "cpu" else chunk_rows
    shown = Progress(f"scoring {len(data)} texts", -(-len(data) // batch_size))
    for start in range(0, len(data), batch_size):
        check("scoring")
        rows_of_batch = order[start : start + batch_size]
        batch = collate([data[i] for i in rows_of_batch], tokenizer.pad_token_id, seq2seq)
        labels = batch["labels"]
        # position t predicts token t + 1 (causal); T5's decoder positions are aligned with the labels
        label_ids = labels if seq2seq else labels[:, 1:]
        mask = label_ids != -100
        tokens = label_ids[mask].to(device)
        batch = {k: v.to(device) for k, v in batch.items()}
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
        if seq2seq:  # decoder inputs from the labels, as T5 itself makes them; no labels, so no loss
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            inputs["decoder_input_ids"] = base.prepare_decoder_input_ids_from_labels(labels=batch["labels"])
        with head.at(mask.to(device), shift=not seq2seq):
            model(**inputs)
        pieces = []
        for i in range(0, len(tokens), chunk_rows):
            logits, targets = head.project(i, chunk_rows), tokens[i : i + chunk_rows]
            pieces += [
                _stats(logits[j : j + stats_rows], targets[j : j + stats_rows], moments)
                for j in range(0, len(logits), stats_rows)
            ]
        columns = [torch.cat(parts).cpu().numpy().astype(np.float32) for parts in zip(*pieces, strict=True)]
        lengths = mask.sum(1).tolist()
        offset = 0
        for row, n in enumerate(lengths):
            cut = slice(offset, offset + n)
            ids = label_ids[row][mask[row]].numpy().astype(np.int32)
            stats = [c[cut] for c in columns]
            out[rows_of_batch[row]] = TokenStats(ids, *stats) if moments else TokenStats(ids, stats[0])
            offset += n
        shown.update(1)
    shown.close()
    return out  # type: ignore[return-value]  # every slot filled


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


def score_in_context(  # noqa: PLR0913  # score_examples' parameters plus the prefixes
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    prefixes: Sequence[str],
    max_length: int,
    seq2seq: bool,
    batch_size: int = 16,
    moments: bool = True,
) -> list[TokenStats]:
    """:func:`score_examples` with ``prefixes[i]`` in front of example i's prompt (other records: ReCaLL's
    shots, in-context demonstrations). The scored positions are exactly the example's own without the
    prefix: its target tokens, truncated at ``max_length`` as they would be without it, so a text's
    likelihood with and without context compares the same tokens. A causal model reads ``<bos> prefix
    prompt target``; T5 reads ``prefix prompt`` on the encoder side."""
    from .errors import PrivauditorError

    plain = [
        item["labels"] if seq2seq else [t for t in item["labels"] if t != -100]
        for item in encode(tokenizer, examples, max_length, seq2seq)
    ]
    extra = max(
        (len(ids) for ids in tokenizer(list(prefixes), add_special_tokens=False)["input_ids"]), default=0
    )
    shifted = [Example(e.sample_id, p + e.prompt, e.target) for e, p in zip(examples, prefixes, strict=True)]
    stats = score_examples(model, tokenizer, shifted, max_length + extra + 8, seq2seq, batch_size, moments)
    out = []
    for stat, ids in zip(stats, plain, strict=True):
        if not np.array_equal(stat.token_ids[: len(ids)], ids):
            raise PrivauditorError("a prefix in front of the prompt changed how a target tokenizes")
        cut = [None if a is None else a[: len(ids)] for a in (stat.logp, stat.mu, stat.sigma)]
        out.append(TokenStats(stat.token_ids[: len(ids)], *cut))
    return out
