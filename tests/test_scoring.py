"""The signals' numbers: alignment with the scored text, batching, prompt learning, T5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.datasets import Example
from privauditor.tasks.scoring import score_examples
from privauditor.tasks.training import apply_seeded, collate, encode

from .helpers import EXAMPLES, fresh_base

TEXTS = [
    *EXAMPLES,
    Example(
        "d",
        "Answer the finance question.\n",
        "Q3 revenue at Initech rose 4% to $88.1 million on cloud demand.",
    ),
    Example("e", "Translate the question to SQL.\n", "SELECT name FROM clients WHERE balance > 5000;"),
]


def adapted(family_name, technique):
    """A base with ``technique`` applied and its new weights randomised (so they matter)."""
    family, tokenizer, base = fresh_base(family_name)
    model = apply_seeded(build_adaptation(technique), base, family, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return family, tokenizer, model.eval()


CASES = [
    ("llama", "prompt"),
    ("llama", "ptuning"),
    ("llama", "prefix"),
    ("t5", "none"),
    ("t5", "prompt"),
    ("opt", "lora"),
]


@pytest.mark.parametrize(("family_name", "technique"), CASES)
def test_token_ids_are_the_target_and_logp_is_the_models_own_log_softmax(family_name, technique):
    family, tokenizer, model = adapted(family_name, technique)
    max_length = 40  # cuts the longest target
    stats = score_examples(model, tokenizer, TEXTS, max_length, family.seq2seq, batch_size=8)
    virtual = getattr(getattr(model, "peft_config", {}).get("default"), "num_virtual_tokens", 0)
    for example, s in zip(TEXTS, stats, strict=True):
        (item,) = encode(tokenizer, [example], max_length, family.seq2seq)
        full_target = tokenizer(example.target, add_special_tokens=False)["input_ids"]
        assert s.token_ids.tolist() == full_target[: len(s.token_ids)] and len(s.token_ids) >= 1
        assert len(s.token_ids) == len(s.logp) == len(s.mu) == len(s.sigma)
        batch = collate([item], tokenizer.pad_token_id, family.seq2seq)
        with torch.inference_mode():
            if family.seq2seq:
                logits = model(**batch).logits[0]
                rows = logits[: len(s.token_ids)]
            else:
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[0]
                if technique in ("prompt", "ptuning"):
                    assert logits.shape[0] == batch["input_ids"].shape[1] + virtual
                start = logits.shape[0] - len(s.token_ids) - 1  # the row before the first target token
                rows = logits[start : start + len(s.token_ids)]
            logprobs = torch.log_softmax(rows.float(), -1)
            expected = logprobs.gather(-1, torch.as_tensor(s.token_ids, dtype=torch.long)[:, None])[:, 0]
            # the model's own loss on the example averages exactly these tokens
            loss = model(**batch).loss.item()
        np.testing.assert_allclose(s.logp, expected.numpy(), rtol=0, atol=1e-5)
        assert -float(np.mean(s.logp, dtype=np.float64)) == pytest.approx(loss, abs=1e-4)
        mu = (logprobs.exp() * logprobs).sum(-1)
        sigma = ((logprobs.exp() * (logprobs - mu[:, None]) ** 2).sum(-1)).sqrt()
        np.testing.assert_allclose(s.mu, mu.numpy(), atol=1e-4)
        np.testing.assert_allclose(s.sigma, sigma.numpy(), atol=1e-4)


@pytest.mark.parametrize(
    ("family_name", "technique"), [("llama", "prompt"), ("t5", "lora"), ("bloom", "none")]
)
def test_batching_with_padding_gives_the_numbers_of_one_text_at_a_time(family_name, technique, monkeypatch):
    import privauditor.tasks.scoring as scoring

    family, tokenizer, model = adapted(family_name, technique)
    together = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=len(TEXTS))
    alone = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=1)
    chunked = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=2, chunk_rows=5)
    # statistics in pieces of 3 rows inside projection chunks of 7 (boundaries that do not line up)
    monkeypatch.setattr(scoring, "STATS_ELEMENTS", 3 * len(tokenizer))
    pieces = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=3, chunk_rows=7)
    for a, b, c, d in zip(together, alone, chunked, pieces, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() == c.token_ids.tolist() == d.token_ids.tolist()
        for field in ("logp", "mu", "sigma"):
            for other in (a, c, d):
                np.testing.assert_allclose(getattr(other, field), getattr(b, field), rtol=1e-5, atol=1e-5)
