"""How scoring groups texts into batches: in length order (so little of a batch is padding, and right
padding gives the numbers of one text at a time), ``score.batch_size`` texts at a time on a CPU, or as many
as a token budget allows on a CUDA device (:func:`token_budget`). :mod:`privauditor.tasks.passes.forward` runs
the batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..datasets import Example
from ..infra.deadline import check
from ..infra.progress import Progress
from ..training.loop import collate, encode

#: the most tokens (texts x padded length) in one scoring batch on an accelerator
MAX_BUDGET_TOKENS = 1 << 16
#: bytes of activations per token that a forward pass without a backward holds at once, per unit of hidden
#: size: a dozen hidden-sized float32 tensors (the gated MLP's three intermediates are 2.7-4 hidden each)
BYTES_PER_TOKEN_HIDDEN = 64


def token_budget(model: Any) -> int | None:
    """On a CUDA device, the tokens (texts x padded length) one scoring batch may hold: half the free
    memory at :data:`BYTES_PER_TOKEN_HIDDEN` bytes per token and hidden unit, at most
    :data:`MAX_BUDGET_TOKENS`; None elsewhere (a CPU scores ``batch_size`` texts at a time, and its numbers
    never depend on the machine's memory). The logits never count: they are made a chunk at a time."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    hidden = head_shape(model)[1]
    return int(min(MAX_BUDGET_TOKENS, max(1, free // 2 // (BYTES_PER_TOKEN_HIDDEN * hidden))))


def cut_batches(lengths: Sequence[int], batch_size: int, budget: int | None = None) -> list[list[int]]:
    """Positions of a length-ascending order cut into batches: ``batch_size`` at a time, or with a token
    ``budget``, as many as keep (texts x the longest's length) within it (at least one text each)."""
    if budget is None:
        return [list(range(s, min(s + batch_size, len(lengths)))) for s in range(0, len(lengths), batch_size)]
    batches: list[list[int]] = []
    longest = 0
    for i, length in enumerate(lengths):
        if batches and (len(batches[-1]) + 1) * max(longest, length) <= budget:
            batches[-1].append(i)
            longest = max(longest, length)
        else:
            batches.append([i])
            longest = length
    return batches


def length_order(data: Sequence[dict[str, Any]]) -> list[int]:
    """The order in which :func:`score_examples` batches encoded texts: by input length, then target length
    (a stable sort, so ``batch_size`` texts at a time of this order are its batches)."""
    return sorted(range(len(data)), key=lambda i: (len(data[i]["input_ids"]), len(data[i]["labels"])))


def scoring_batches(  # noqa: PLR0913  # the scoring kernel's parameters
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    batch_size: int,
    budget: int | None = None,
) -> Iterator[tuple[list[int], dict[str, torch.Tensor], torch.Tensor, torch.Tensor]]:
    """Length-bucketed batches (texts of similar length together, so little of a batch is padding), of
    ``batch_size`` texts or within a token ``budget`` (:func:`cut_batches`), with progress: each batch's
    example indices, its tensors, the label ids of its scored positions (position t predicts token t + 1
    in a causal model; T5's decoder positions are aligned with the labels) and their mask."""
    data = encode(tokenizer, examples, max_length, seq2seq)
    order = length_order(data)
    width = [max(len(data[i]["input_ids"]), len(data[i]["labels"])) for i in order]
    cuts = cut_batches(width, batch_size, budget)
    shown = Progress(f"scoring {len(data)} texts", len(cuts))
    for cut in cuts:
        check("scoring")
        rows_of_batch = [order[i] for i in cut]
        batch = collate([data[i] for i in rows_of_batch], tokenizer.pad_token_id, seq2seq)
        label_ids = batch["labels"] if seq2seq else batch["labels"][:, 1:]
        yield rows_of_batch, batch, label_ids, label_ids != -100
        shown.update(1)
    shown.close()


def head_shape(model: Any) -> tuple[int, ...]:
    """The shape of ``model``'s output head's weight, (vocabulary, hidden): an int8-quantised head
    (tasks/shipping) gives its weight by a call."""
    weight = model.get_output_embeddings().weight
    return tuple((weight() if callable(weight) else weight).shape)
