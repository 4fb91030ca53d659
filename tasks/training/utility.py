"""A trained model's utility: its mean per-token NLL on held-out records (the cell's validation part),
encoded and batched as training encodes them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..datasets import Example
from .loop import collate, encode, predicted_tokens


@torch.inference_mode()
def validation_loss(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    max_length: int,
    seq2seq: bool,
    batch_size: int = 16,
) -> float:
    """Utility: mean per-token NLL (nats) of the model on the examples' target tokens (at the model's
    precision)."""
    from ..infra.precision import autocast

    model.eval()
    device = next(model.parameters()).device
    data = encode(tokenizer, examples, max_length, seq2seq)
    total = tokens = 0.0
    for start in range(0, len(data), batch_size):
        batch = collate(data[start : start + batch_size], tokenizer.pad_token_id, seq2seq)
        n = predicted_tokens(batch["labels"], seq2seq)
        with autocast(model):
            total += model(**{k: v.to(device) for k, v in batch.items()}).loss.item() * n
        tokens += n
    return total / max(1, tokens)
