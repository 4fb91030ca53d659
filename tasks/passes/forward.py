"""Scoring: one batched forward pass per text, reduced to per-token statistics (never the T x V matrix).

For every example the scored positions are its target tokens conditioned on its prompt (the design's
rule, the same for every family and technique): a causal model reads ``<s> prompt target`` and the
logits one step before each target token are used; virtual tokens that prompt tuning / P-tuning put in
front of the input are sliced off (their number is the logits' length minus the input's); prefix
tuning's key/values never appear as positions. T5 is scored on its decoder labels.

Per token it keeps ``logp`` (log p of the actual token), and ``mu`` / ``sigma``, the mean and standard
deviation of log p over the vocabulary under p (what Min-K%++ normalises by); and (the signal store's
format 2) ``top1_logp``, the largest log p over the vocabulary, ``topk_lse``, the log-sum-exp of the
:data:`~privauditor.tasks.passes.signal_table.TOPK` largest log p (the probability mass top-k sampling keeps), and
``rank``, the actual token's rank (1 + the tokens with a strictly larger log p; ties share the better
rank), read off those top-k values: exact up to TOPK, and :data:`~privauditor.tasks.passes.signal_table.RANK_CAP`
(TOPK + 1) for any worse rank. All from the same log-softmax rows in the same pieces (the top-k's second
stage once per projection chunk, on the candidates its pieces kept).
Right padding with an attention mask gives the same numbers as scoring one text at a time (a test checks
it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from ..datasets import Example
from ..training.loop import encode
from .batches import head_shape, scoring_batches, token_budget
from .signal_table import RANK_COLUMN, TOPK, TokenStats


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _stats(
    rows: torch.Tensor, tokens: torch.Tensor, moments: bool, extended: bool = True
) -> tuple[torch.Tensor, ...]:
    """log p of ``tokens`` under the logits ``rows`` (N x V), and optionally mu and sigma of log p and
    (``extended``, the store's format 2) the top-1 log p, the token's rank and the top-k log-sum-exp.
    :func:`score_examples` runs the two halves, :func:`_piece_stats` and :func:`_top_stats`, on different
    numbers of rows; this is both on the same rows."""
    return _top_stats(_piece_stats(rows, tokens, moments, extended))


def _piece_stats(
    rows: torch.Tensor, tokens: torch.Tensor, moments: bool, extended: bool
) -> tuple[torch.Tensor, ...]:
    """What needs the full log-softmax rows, on a piece of them: log p of ``tokens``, mu and sigma
    (``moments``) and (``extended``) the :func:`_candidates` for the top-k values."""
    logprobs = torch.log_softmax(rows.float(), dim=-1)
    logp = logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    if not moments:
        return (logp,)
    weighted = logprobs.exp().mul_(logprobs)  # p log p, in place: one N x V buffer besides log p
    mu = weighted.sum(-1)
    second = torch.linalg.vecdot(weighted, logprobs)  # sum of p (log p)^2, no N x V temporary
    sigma = (second - mu.square()).clamp_min(0.0).sqrt()
    if not extended:
        return logp, mu, sigma
    return logp, mu, sigma, _candidates(logprobs, min(TOPK, logprobs.shape[-1]))


def _top_stats(found: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """:func:`_piece_stats`' columns (of any number of pieces' rows at once: these steps cost mostly their
    calls) with the candidates replaced by the top-1 log p, the token's rank and the top-k log-sum-exp."""
    if len(found) < 4:
        return tuple(found)
    logp, mu, sigma, candidates = found
    top = _select(candidates, min(TOPK, candidates.shape[-1]))
    # 1 + the top values above the token's: exact up to TOPK, and TOPK + 1 (RANK_CAP) for any worse rank
    rank = torch.count_nonzero(top > logp[:, None], dim=-1).add_(1)
    return logp, mu, sigma, top.amax(-1), rank.float(), torch.logsumexp(top, -1)


TOP_BLOCKS = 512  # blocks of the vocabulary in the two-stage top-k


def _candidates(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The first stage of a two-stage top-k: entries of each row among which its ``k`` largest lie, the
    same number for every row of one vocabulary. The vocabulary is cut into ``TOP_BLOCKS`` blocks (block j:
    entries j, j + TOP_BLOCKS, ..., so that the blocks' maxima are one vectorised reduction), and the
    candidates are the ``k`` blocks with the largest maxima and the entries past the last whole stride.
    They hold every one of the row's ``k`` largest values: a value outside them has ``k`` block maxima at
    least as large. A vocabulary too small for blocks gives its ``k`` largest values directly."""
    n, vocab = rows.shape
    size = vocab // TOP_BLOCKS
    if size < 2 or 2 * k > TOP_BLOCKS:
        return _select(rows, k)
    whole = rows[:, : size * TOP_BLOCKS].view(n, size, TOP_BLOCKS)
    best = _largest_at(whole.amax(1), k)
    candidates = whole.gather(2, best[:, None, :].expand(n, size, k)).reshape(n, -1)
    if size * TOP_BLOCKS < vocab:
        candidates = torch.cat([candidates, rows[:, size * TOP_BLOCKS :]], dim=-1)
    return candidates


def _select(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` largest values of each row (unordered). On a CPU by numpy's introselect (``np.partition``,
    one thread), which beats ``topk`` there even where ``topk`` splits the rows over two threads: measured
    on 2 cores at 2 threads, 3.8 against 7.7 us per row for 524 rows of 2,736 candidates (vocabulary 32,000)
    and 0.7 against 1.9 for 4,096 rows of 320 (vocabulary 4,096)."""
    if rows.device.type != "cpu":
        return rows.topk(k, dim=-1, sorted=False).values
    values = rows.detach().numpy()
    return torch.from_numpy(np.partition(values, values.shape[1] - k, axis=1)[:, values.shape[1] - k :])


def _numpy_selects(rows: torch.Tensor) -> bool:
    """Whether numpy's selection is the faster for the first stage's few columns: on a CPU where torch has
    one thread (a sweep's worker at one CPU per trial; at two threads ``topk`` wins on 512 block maxima)."""
    return rows.device.type == "cpu" and torch.get_num_threads() == 1


def _largest_at(rows: torch.Tensor, k: int) -> torch.Tensor:
    """The column indices of each row's ``k`` largest values: with numpy's selection (:func:`_numpy_selects`)
    those at or above the k-th largest, where that makes exactly ``k`` in every row (no tie at the
    boundary), else ``topk``'s."""
    if _numpy_selects(rows):
        values = rows.detach().numpy()
        kth = torch.from_numpy(np.partition(values, values.shape[1] - k, axis=1)[:, -k])
        chosen = rows >= kth[:, None]
        if bool((chosen.sum(1) == k).all()):
            return chosen.nonzero()[:, 1].view(-1, k)
    return rows.topk(k, dim=-1, sorted=False).indices


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
    extended: bool = True,
) -> list[TokenStats]:
    """Per-token statistics of ``model`` on every example's target tokens, in input order (batches
    are formed from texts of similar length, which right padding makes give the same numbers).

    ``moments=False`` skips every statistic but ``logp`` (neighbour texts need only the log-likelihood);
    ``extended=False`` keeps ``mu``/``sigma`` but not the rest (the store's format 1, for the scoring
    benchmark's comparison);
    ``chunk_rows`` bounds how many positions' full-vocabulary log-softmax exist at once (default: as
    many as keep one chunk's logits near 16 M numbers, so memory does not grow with the vocabulary).
    """
    from ..infra.precision import autocast

    model.eval()
    device = _device(model)
    out: list[TokenStats | None] = [None] * len(examples)
    vocab = head_shape(model)[0]
    chunk_rows = chunk_rows or max(1, CHUNK_ELEMENTS // vocab)
    # on an accelerator the whole chunk at once: there, many small pieces would cost kernel launches
    stats_rows = max(1, min(chunk_rows, STATS_ELEMENTS // vocab)) if device.type == "cpu" else chunk_rows
    budget = token_budget(model)
    for rows_of_batch, batch, label_ids, mask in scoring_batches(
        tokenizer, examples, max_length, seq2seq, batch_size, budget
    ):
        tokens = label_ids[mask].to(device)
        with autocast(model):  # the model's precision: bf16 compute under bf16-mixed
            head = _run(model, batch, mask, seq2seq)
        columns = _columns(model, head, tokens, (chunk_rows, stats_rows), moments, extended)
        for row, stats in enumerate(_by_row(columns, label_ids, mask)):
            out[rows_of_batch[row]] = stats
    return out  # type: ignore[return-value]  # every slot filled


def _columns(
    model: Any, head: TargetHead, tokens: torch.Tensor, rows: tuple[int, int], moments: bool, extended: bool
) -> list[np.ndarray]:
    """A batch's statistics, one float32 array per statistic over its target positions: the logits
    projected ``rows[0]`` positions at a time (under the model's autocast), the statistics computed in
    float32 ``rows[1]`` positions at a time."""
    from ..infra.precision import autocast

    chunk_rows, stats_rows = rows
    chunks = []
    for i in range(0, len(tokens), chunk_rows):
        with autocast(model):
            logits = head.project(i, chunk_rows)
        targets = tokens[i : i + chunk_rows]  # the statistics in float32, outside autocast
        pieces = [
            _piece_stats(logits[j : j + stats_rows], targets[j : j + stats_rows], moments, extended)
            for j in range(0, len(logits), stats_rows)
        ]
        chunks.append(_top_stats([torch.cat(parts) for parts in zip(*pieces, strict=True)]))
    return [torch.cat(parts).cpu().numpy().astype(np.float32) for parts in zip(*chunks, strict=True)]


def _by_row(columns: list[np.ndarray], label_ids: torch.Tensor, mask: torch.Tensor) -> list[TokenStats]:
    """A batch's statistics cut into each row's (its target tokens, in order)."""
    found, offset = [], 0
    for row, n in enumerate(mask.sum(1).tolist()):
        cut = slice(offset, offset + n)
        ids = label_ids[row][mask[row]].numpy().astype(np.int32)
        stats = [c[cut] for c in columns]
        if len(stats) > RANK_COLUMN:
            stats[RANK_COLUMN] = stats[RANK_COLUMN].astype(np.int16)  # exact small integers
        found.append(TokenStats(ids, *stats))
        offset += n
    return found


def _run(model: Any, batch: dict[str, torch.Tensor], mask: torch.Tensor, seq2seq: bool) -> TargetHead:
    """``model`` run on ``batch``, its final hidden states at the scored positions kept (no logits)."""
    device = _device(model)
    head = TargetHead(model)
    batch = {k: v.to(device) for k, v in batch.items()}
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    if seq2seq:  # decoder inputs from the labels, as T5 itself makes them; no labels, so no loss
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        inputs["decoder_input_ids"] = base.prepare_decoder_input_ids_from_labels(labels=batch["labels"])
    with head.at(mask.to(device), shift=not seq2seq):
        model(**inputs)
    return head


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
    from ..infra.errors import PrivauditorError

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
        out.append(stat.cut(len(ids)))
    return out


@torch.inference_mode()
def reference_kl(  # noqa: PLR0913  # two models, their texts and plain numbers
    target: Any,
    reference: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    batch_size: int = 16,
) -> list[np.ndarray]:
    """Per example, at each of its target tokens, KL(p_reference || p_target) =
    sum_v p_reference(v) [log p_reference(v) - log p_target(v)] over the next-token distributions (both
    models read the same tokens and must share the vocabulary; exactly 0 where they are one model). One
    pass through each model per text, projected a chunk at a time."""
    from ..infra.errors import PrivauditorError
    from ..infra.precision import autocast

    target.eval()
    reference.eval()
    vocab = head_shape(target)[0]
    if head_shape(reference)[0] != vocab:
        raise PrivauditorError("the target and the reference have vocabularies of different sizes")
    chunk = max(1, min(CHUNK_ELEMENTS, STATS_ELEMENTS) // vocab)
    out: list[np.ndarray | None] = [None] * len(examples)
    for rows_of_batch, batch, _, mask in scoring_batches(
        tokenizer, examples, max_length, seq2seq, batch_size
    ):
        pieces = []
        with autocast(target):  # both at the cell's precision
            heads = _run(target, batch, mask, seq2seq), _run(reference, batch, mask, seq2seq)
        for i in range(0, int(mask.sum()), chunk):
            with autocast(target):
                projected = [h.project(i, chunk) for h in heads]
            log_t, log_r = (torch.log_softmax(p.float(), -1) for p in projected)  # float32, outside autocast
            log_t = log_t.to(log_r.device)
            pieces.append(torch.linalg.vecdot(log_r.exp(), log_r - log_t).cpu())
        values = torch.cat(pieces).numpy().astype(np.float32)
        offset = 0
        for row, n in enumerate(mask.sum(1).tolist()):
            out[rows_of_batch[row]] = values[offset : offset + n]
            offset += n
    return out  # type: ignore[return-value]  # every slot filled
