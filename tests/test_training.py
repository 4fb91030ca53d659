"""The shared training loop: target-only labels, determinism, utility, and the T5 objective."""

from __future__ import annotations

import pytest
import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.datasets import Example
from privauditor.tasks.training.loop import (
    TrainConfig,
    apply_seeded,
    collate,
    encode,
    predicted_tokens,
    train,
)
from privauditor.tasks.training.utility import validation_loss

from .helpers import EXAMPLES, fresh_base


@pytest.mark.parametrize("family_name", ["llama", "t5"])
def test_labels_cover_exactly_the_target_tokens(family_name):
    family, tokenizer, _ = fresh_base(family_name)
    example = Example("x", "Classify the statement.\n", "Stance: support")
    (item,) = encode(tokenizer, [example], 64, family.seq2seq)
    target_ids = tokenizer(example.target, add_special_tokens=False)["input_ids"]
    assert [t for t in item["labels"] if t != -100] == target_ids
    if family.seq2seq:
        assert item["input_ids"][:-1] == tokenizer(example.prompt, add_special_tokens=False)["input_ids"]
    else:
        assert item["input_ids"][-len(target_ids) :] == target_ids


def test_truncation_keeps_the_prompt_and_cuts_the_target():
    family, tokenizer, _ = fresh_base("gpt2")
    long = Example("x", "Answer.\n", "word " * 200)
    (item,) = encode(tokenizer, [long], 32, family.seq2seq)
    assert len(item["input_ids"]) == 32 and item["labels"][:3] == [-100, -100, -100]


def test_padding_is_ignored_by_the_loss():
    family, tokenizer, model = fresh_base("opt")
    items = encode(tokenizer, EXAMPLES, 64, family.seq2seq)
    together = collate(items, tokenizer.pad_token_id, False)
    with torch.inference_mode():
        batched = model(**together).loss.item() * predicted_tokens(together["labels"], False)
        alone = sum(
            model(**(b := collate([i], tokenizer.pad_token_id, False))).loss.item()
            * predicted_tokens(b["labels"], False)
            for i in items
        )
    assert batched == pytest.approx(alone, rel=1e-4)


def test_training_is_deterministic_for_a_seed():
    weights = []
    for _ in range(2):
        family, tokenizer, base = fresh_base("llama")
        model = apply_seeded(build_adaptation("lora"), base, family, seed=7)
        result = train(
            model, tokenizer, EXAMPLES * 3, TrainConfig(epochs=2, lr=3e-3, batch_size=4, seed=7), False
        )
        weights.append(
            (result.loss_curve, [p.detach().clone() for p in model.parameters() if p.requires_grad])
        )
    assert weights[0][0] == weights[1][0]
    assert all(torch.equal(a, b) for a, b in zip(weights[0][1], weights[1][1], strict=True))


def test_utility_improves_on_what_was_trained():
    family, tokenizer, base = fresh_base("t5")
    before = validation_loss(base, tokenizer, EXAMPLES, 64, True)
    model = build_adaptation("full").apply(base, family)
    result = train(model, tokenizer, EXAMPLES, TrainConfig(epochs=10, lr=1e-3, batch_size=3), True)
    assert result.epoch_losses[-1] < result.epoch_losses[0] and result.steps == 10
    assert validation_loss(model, tokenizer, EXAMPLES, 64, True) < before - 0.5


def test_untrained_techniques_take_no_steps():
    family, tokenizer, base = fresh_base("bloom")
    model = build_adaptation("none").apply(base, family)
    result = train(model, tokenizer, EXAMPLES, TrainConfig(epochs=3, lr=1e-3), False)
    assert result.steps == 0 and result.loss_curve == []
