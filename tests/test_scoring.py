"""The signals' numbers: alignment with the scored text, batching, prompt learning, T5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.datasets import Example
from privauditor.tasks.passes.forward import score_examples
from privauditor.tasks.passes.signal_table import RANK_CAP, TOPK
from privauditor.tasks.training.loop import apply_seeded, collate, encode

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
        assert len(s.token_ids) == len(s.logp) == len(s.mu) == len(s.sigma) == len(s.rank) == len(s.topk_lse)
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
        # the store's format 2: top-1 log p, the token's rank (1 + tokens strictly above it), top-40 mass
        np.testing.assert_allclose(s.top1_logp, logprobs.max(-1).values.numpy(), atol=1e-5)
        rank = 1 + (logprobs > expected[:, None]).sum(-1).numpy()
        assert s.rank.dtype == np.int16 and s.rank.tolist() == np.minimum(rank, RANK_CAP).tolist()
        assert (s.rank == 1).tolist() == (logprobs.argmax(-1).numpy() == s.token_ids).tolist()
        top40 = torch.sort(logprobs, -1, descending=True).values[:, :TOPK]
        np.testing.assert_allclose(s.topk_lse, torch.logsumexp(top40, -1).numpy(), atol=1e-5)
        assert (s.topk_lse <= 1e-6).all() and (s.topk_lse >= s.top1_logp - 1e-6).all()


@pytest.mark.parametrize(
    ("family_name", "technique"), [("llama", "prompt"), ("t5", "lora"), ("bloom", "none")]
)
def test_batching_with_padding_gives_the_numbers_of_one_text_at_a_time(family_name, technique, monkeypatch):
    import privauditor.tasks.passes.forward as scoring

    family, tokenizer, model = adapted(family_name, technique)
    together = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=len(TEXTS))
    alone = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=1)
    chunked = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=2, chunk_rows=5)
    # statistics in pieces of 3 rows inside projection chunks of 7 (boundaries that do not line up)
    monkeypatch.setattr(scoring, "STATS_ELEMENTS", 3 * len(tokenizer))
    pieces = score_examples(model, tokenizer, TEXTS, 64, family.seq2seq, batch_size=3, chunk_rows=7)
    for a, b, c, d in zip(together, alone, chunked, pieces, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist() == c.token_ids.tolist() == d.token_ids.tolist()
        for field in ("logp", "mu", "sigma", "top1_logp", "rank", "topk_lse"):
            for other in (a, c, d):
                np.testing.assert_allclose(getattr(other, field), getattr(b, field), rtol=1e-5, atol=1e-5)


def test_rank_counts_strictly_larger_log_probabilities_and_is_clipped(monkeypatch):
    import privauditor.tasks.passes.forward as scoring

    # vocabulary of 5; row 1: the token (2) ties the best -> rank 1; row 2: three above it -> rank 4
    rows = torch.tensor([[1.0, 3.0, 3.0, 0.0, 0.0], [2.0, 2.5, 3.0, 0.0, 1.0]])
    tokens = torch.tensor([2, 4])
    logp, mu, sigma, top1, rank, lse = scoring._stats(rows, tokens, moments=True)
    logprobs = torch.log_softmax(rows, -1)
    assert rank.tolist() == [1.0, 4.0]
    assert top1.tolist() == pytest.approx(logprobs.max(-1).values.tolist())
    assert lse.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)  # k 40 >= V: the whole mass
    monkeypatch.setattr(scoring, "TOPK", 2)
    _, _, _, _, rank, lse = scoring._stats(rows, tokens, moments=True)
    assert rank.tolist() == [1.0, 3.0]  # 4 is outside the top 2: stored as 2 + 1
    assert lse.tolist() == pytest.approx(torch.logsumexp(logprobs.topk(2).values, -1).tolist())
    assert len(scoring._stats(rows, tokens, moments=True, extended=False)) == 3


@pytest.mark.parametrize(("family_name", "technique"), [("llama", "prompt"), ("t5", "lora")])
def test_reference_kl_is_the_divergence_of_the_two_next_token_distributions(family_name, technique):
    from privauditor.tasks.passes.forward import reference_kl

    family, tokenizer, model = adapted(family_name, technique)
    _, _, reference = fresh_base(family_name)
    found = reference_kl(model, reference.eval(), tokenizer, TEXTS, 40, family.seq2seq, batch_size=8)
    stats = score_examples(model, tokenizer, TEXTS, 40, family.seq2seq, batch_size=8)
    for example, values, scored in zip(TEXTS, found, stats, strict=True):
        assert len(values) == len(scored.logp)
        (item,) = encode(tokenizer, [example], 40, family.seq2seq)
        batch = collate([item], tokenizer.pad_token_id, family.seq2seq)
        rows = {}
        for name, net in (("target", model), ("reference", reference)):
            with torch.inference_mode():
                if family.seq2seq:
                    logits = net(**batch).logits[0][: len(values)]
                else:
                    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
                    logits = net(**inputs).logits[0]
                    start = logits.shape[0] - len(values) - 1
                    logits = logits[start : start + len(values)]
            rows[name] = torch.log_softmax(logits.float(), -1)
        expected = (rows["reference"].exp() * (rows["reference"] - rows["target"])).sum(-1)
        np.testing.assert_allclose(values, expected.numpy(), atol=1e-4)
        assert (values > -1e-5).all()  # a divergence
    # a model against itself: exactly 0, so InfoRMIA on the base scores every text alike
    assert all((v == 0).all() for v in reference_kl(model, model, tokenizer, TEXTS, 40, family.seq2seq))


def test_the_two_stage_top_k_finds_the_k_largest_values():
    import privauditor.tasks.passes.forward as scoring

    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(6, 10_007, generator=generator)  # 512 blocks of 19 entries and 279 left over
    rows[0, -5:] = 50.0  # the largest values past the last whole stride
    rows[1, 3::512] = 9.0  # one block holds them all, tied
    rows[2] = torch.round(rows[2] * 2)  # many ties at the boundary
    threads = torch.get_num_threads()
    try:
        for torch_threads in (1, 2):  # the blocks chosen by numpy's selection at one thread, topk's at more
            torch.set_num_threads(torch_threads)
            for width in (10_007, 4096, 1100):  # 1100: blocks of 2
                for some in (rows, rows[3:]):  # ties at a boundary (topk's indices) and none (numpy's)
                    found = scoring._select(scoring._candidates(some[:, :width], 40), 40).sort(-1).values
                    assert torch.equal(found, some[:, :width].topk(40, -1).values.sort(-1).values)
    finally:
        torch.set_num_threads(threads)
