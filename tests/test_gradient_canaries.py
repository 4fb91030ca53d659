"""DP's gradient canaries (``defence_params.dp.gradient_canaries``): where they enter the step, what the
auditor reads back, and that their score is the claimed mechanism's likelihood ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privauditor.tasks.adaptations import build_adaptation
from privauditor.tasks.datasets import load_dataset
from privauditor.tasks.defences._gradient_canaries import GradientCanaries
from privauditor.tasks.defences.dp import DPSettings, Privacy
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.training.loop import apply_seeded, collate, encode

from .helpers import fresh_base


def _lora():
    family, tokenizer, base = fresh_base("gpt2")
    model = apply_seeded(build_adaptation("lora", None), base, family, seed=0)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    examples = load_dataset("finance").examples[:4]
    batch = collate(encode(tokenizer, examples, 64, False), tokenizer.pad_token_id, False)
    return model, params, batch


def _step(model, params, privacy, sigma):
    return privacy.make_step(sigma, False)(model, list(params.values()), 0.0, 1)


def test_a_canary_adds_exactly_its_clipping_norm_at_its_coordinate_after_clipping():
    """Noise off: the step's gradient with canaries less the same step's without them is C / B at each
    drawn canary's coordinate and nothing anywhere else; each canary's score is the claimed mechanism's
    log-likelihood ratio of what it moved (1 drawn, 0 not: the data's part is taken out); only canaries
    whose coin put them in are drawn, each at about the sampling rate."""
    model, params, batch = _lora()
    clip, sigma, steps = 0.05, 2.0, 12
    plain = Privacy(1.0, 1e-5, clip, False, records=16, batch_size=4, epochs=1, seed=3)
    audited = Privacy(
        1.0, 1e-5, clip, False, records=16, batch_size=4, epochs=1, seed=3, gradient_canaries=600
    )
    base_step, step = _step(model, params, plain, sigma), _step(model, params, audited, sigma)
    canaries = step.canaries
    assert canaries.m == 600 and canaries.rate == 0.25
    drawn = torch.zeros(600)
    for _ in range(steps):
        before = canaries.scores.clone()
        base_step(batch, 1.0)
        reference = {n: p.grad.clone() for n, p in params.items()}
        step(batch, 1.0)
        added = {n: (p.grad - reference[n]).flatten() * plain.batch_size for n, p in params.items()}
        moved = (canaries.scores - before).float()
        hit = moved > 0  # the LLR of x = 1 is positive, of x = 0 negative
        for p, flat, mine in canaries.where:
            name = next(n for n, q in params.items() if q is p)
            expected = torch.zeros_like(added[name])
            expected[flat] = hit[mine].float() * clip
            assert torch.allclose(added[name], expected, atol=1e-6), name
        values = {
            1: math.log1p(0.25 * math.expm1(0.5 / sigma**2)),
            0: math.log1p(0.25 * math.expm1(-0.5 / sigma**2)),
        }
        assert torch.allclose(
            moved[hit].double(), torch.full((int(hit.sum()),), values[1], dtype=torch.float64)
        )
        assert torch.allclose(
            moved[~hit].double(), torch.full((int((~hit).sum()),), values[0], dtype=torch.float64)
        )
        drawn += hit
    included = canaries.included
    assert drawn[~included].sum() == 0 and 250 < int(included.sum()) < 350
    assert abs(float(drawn[included].mean()) / steps - 0.25) < 0.03


def test_canaries_take_distinct_coordinates_capped_at_the_trainable_parameters():
    params = {"a": torch.zeros(3, 4, requires_grad=True), "b": torch.zeros(5, requires_grad=True)}
    canaries = GradientCanaries(params, 100, 0.5, 1.0, 1.0, seed=0)
    assert canaries.m == 17
    taken = [(id(p), int(i)) for p, flat, _ in canaries.where for i in flat]
    assert len(set(taken)) == 17
    order = sorted(int(i) for _, _, mine in canaries.where for i in mine)
    assert order == list(range(17))


def test_the_setting_is_checked_and_only_a_set_count_enters_the_cell_id():
    with pytest.raises(PrivauditorError, match="gradient_canaries must be a whole number >= 0, not -1"):
        DPSettings(gradient_canaries=-1)
    from privauditor.tasks.defences.dp import DPDefence

    plain = DPDefence().resolve({"epsilon": 4}, 100)
    assert "gradient_canaries" not in plain
    assert DPDefence().resolve({"epsilon": 4, "gradient_canaries": 10}, 100)["gradient_canaries"] == 10


def test_under_the_claimed_noise_the_scores_of_canaries_left_out_and_put_in_differ_as_the_claim_says():
    """Noise at the claimed σ: a left-out canary's per-step x is N(0, σ²) (its coordinate's noise alone,
    the data's part taken out), so its score's mean over steps is E log(1 − q + q·exp((x − ½)/σ²))."""
    model, params, batch = _lora()
    sigma = 1.5
    privacy = Privacy(
        1.0, 1e-5, 0.05, True, records=16, batch_size=4, epochs=1, seed=5, gradient_canaries=2000
    )
    step = _step(model, params, privacy, sigma)
    for _ in range(6):
        step(batch, 1.0)
    scores, coins = step.canaries.result()
    x = np.random.default_rng(0).normal(0, sigma, 400_000)
    expected = 6 * np.mean(np.log1p(0.25 * np.expm1((x - 0.5) / sigma**2)))
    out = scores[~coins]
    assert abs(out.mean() - expected) < 4 * out.std() / math.sqrt(len(out))
    assert scores[coins].mean() > out.mean()
