"""Per-sample gradients: the batched module against one backward pass per sample, on causal, T5 and peft
models, and the gradient norms GradNorm reads.

Tolerance: for every sample, the largest absolute difference over all parameters is at most 1e-6 times
that sample's largest gradient entry, with the model in float64 (measured: up to 6e-8 of it; in float32
the two paths' summation orders left them 1e-6 to 1.2e-4 apart, depending on the base). Relative to
each entry it cannot be stated: some gradients are zero in exact arithmetic (the key projection's bias,
which softmax cancels) and both sides then hold rounding noise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.passes.gradients import gradient_norms, per_sample_gradients, target_nll
from privauditor.tasks.training.loop import apply_seeded, collate, encode

from .helpers import EXAMPLES, fresh_base
from .test_scoring import TEXTS

CASES = [
    ("llama", "lora"),  # peft layers, tied embeddings untouched
    ("llama", "llama_adapter"),  # a parameter used inside a whole attention block
    ("opt", "none"),  # every parameter, learned positions from the attention mask
    ("gpt2", "full"),  # learned positions, per sample through position_ids
    ("gpt2", "prompt"),  # peft prompt tuning: one prompt for the batch, encoded per sample here
    ("bloom", "ia3"),  # parameter containers inside peft layers
    ("t5", "full"),  # relative-position bias computed once for the batch: the one-at-a-time path
    ("t5", "ptuning"),  # encoder-decoder with a prompt encoder
]


def adapted(family_name, technique, seed=0):
    family, tokenizer, base = fresh_base(family_name)
    model = apply_seeded(build_adaptation(technique), base, family, seed=seed)
    torch.manual_seed(seed)
    with torch.no_grad():  # new weights away from their initial values (LoRA's B, gates start at zero)
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.02)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if not params:  # `none`: every parameter, as GradNorm takes them
        for p in model.parameters():
            p.requires_grad_(True)
        params = dict(model.named_parameters())
    return family, tokenizer, model.eval(), params


def one_at_a_time(model, tokenizer, examples, seq2seq, params):
    rows = []
    for item in encode(tokenizer, examples, 48, seq2seq):
        loss = model(**collate([item], tokenizer.pad_token_id, seq2seq)).loss
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        rows.append(
            {
                n: torch.zeros_like(p) if g is None else g
                for (n, p), g in zip(params.items(), grads, strict=True)
            }
        )
    return rows


@pytest.mark.parametrize(("family_name", "technique"), CASES)
def test_batched_per_sample_gradients_equal_one_backward_pass_per_sample(family_name, technique):
    family, tokenizer, model, params = adapted(family_name, technique)
    examples = TEXTS  # five texts of different lengths: right padding inside the batch
    batch = collate(encode(tokenizer, examples, 48, family.seq2seq), tokenizer.pad_token_id, family.seq2seq)
    model.double()  # in float32 the two paths' summation orders left them up to 1.2e-4 apart on some bases
    grads = per_sample_gradients(model, batch, lambda m, b: target_nll(m, b, family.seq2seq), params)
    assert set(grads) == set(params) and all(
        g.shape == (len(examples), *params[n].shape) for n, g in grads.items()
    )
    for i, expected in enumerate(one_at_a_time(model, tokenizer, examples, family.seq2seq, params)):
        scale = max(float(g.abs().max()) for g in expected.values())
        worst = max(float((grads[n][i] - expected[n]).abs().max()) for n in params)
        assert scale > 0 and worst <= 1e-6 * scale, (i, worst, scale)


def test_gradient_norms_are_the_norms_of_the_per_sample_gradients_and_leave_the_model_as_found():
    family, tokenizer, model, params = adapted("gpt2", "lora")
    expected = one_at_a_time(model, tokenizer, TEXTS, False, params)
    for p in (2.0, 1.0):
        norms = gradient_norms(model, tokenizer, TEXTS, 48, False, norm=p, batch_size=3)
        flat = [torch.cat([g.flatten() for g in row.values()]) for row in expected]
        np.testing.assert_allclose(
            norms, [float(torch.linalg.vector_norm(f, ord=p)) for f in flat], rtol=1e-4
        )
    family, tokenizer, base = fresh_base("gpt2")
    for p in base.parameters():
        p.requires_grad_(False)
    everything = gradient_norms(base, tokenizer, EXAMPLES, 48, False)
    assert everything.shape == (3,) and (everything > 0).all()
    assert not any(p.requires_grad for p in base.parameters())  # a frozen model is left frozen


@pytest.mark.parametrize(("family_name", "technique"), [("llama", "llama_adapter"), ("t5", "full")])
def test_batches_with_and_without_padding_take_their_own_paths(family_name, technique):
    """A batch whose rows have one length needs no attention mask, the next one does: the model takes
    other paths (a mask of None, then a tensor), and each batch's gradients are still its own."""
    from privauditor.tasks.datasets import Example

    family, tokenizer, model, params = adapted(family_name, technique)
    twin = Example("a-twin", EXAMPLES[0].prompt, EXAMPLES[0].target)  # as long as "a": an unpadded batch
    texts = [EXAMPLES[0], twin, *TEXTS[1:]]
    norms = gradient_norms(model, tokenizer, texts, 48, family.seq2seq, batch_size=2)
    expected = one_at_a_time(model, tokenizer, texts, family.seq2seq, params)
    flat = [torch.cat([g.flatten() for g in row.values()]) for row in expected]
    np.testing.assert_allclose(norms, [float(torch.linalg.vector_norm(f.double())) for f in flat], rtol=1e-4)
