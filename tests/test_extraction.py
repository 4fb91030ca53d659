"""Discoverable extraction from the signal store, checked against real ``generate()`` calls."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privauditor.tasks.datasets import Example, load_dataset
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.leakage.extraction import (
    ExtractionSettings,
    extraction_metrics,
    greedy_extracted,
    samples_needed,
    suffix_logprob,
)
from privauditor.tasks.passes.forward import score_examples
from privauditor.tasks.passes.signal_table import Signals
from privauditor.tasks.training.loop import encode

from .helpers import fresh_base

MAX_LENGTH = 96


def test_samples_needed_is_the_least_n_of_one_minus_the_miss_rate_to_the_n():
    # p_z 1/2: one sample gives it with probability 1/2; p_z 0.1: 1 - 0.9^n >= 0.5 first at n 7 (0.522;
    # n 6: 0.469); p_z 1e-20: n = ln 2 / 1e-20 = 6.93e19, where 1 - p_z rounds to 1 in floating point
    assert samples_needed(math.log(0.5), 0.5) == 1
    assert samples_needed(math.log(0.1), 0.5) == 7
    assert samples_needed(math.log(0.1), 0.99) == 44  # ln 0.01 / ln 0.9 = 43.7
    assert samples_needed(-20 * math.log(10), 0.5) == pytest.approx(math.log(2) * 1e20, rel=1e-9)
    assert samples_needed(-math.inf, 0.5) == math.inf and samples_needed(0.0, 0.5) == 1
    assert samples_needed(-1e4, 0.5) == math.inf


def test_the_verdicts_read_the_suffix_positions_alone():
    settings = ExtractionSettings(prefix=2, suffix=3)
    assert greedy_extracted(np.array([5, 9, 1, 1, 1, 7]), settings) is True  # positions 2-4
    assert greedy_extracted(np.array([1, 1, 1, 2, 1, 1]), settings) is False
    assert greedy_extracted(np.array([1, 1, 1, 1]), settings) is None  # shorter than 2 + 3
    # p_z: (log p - lse) summed over positions 2-4: (-1 + 0.5) + (-0.2 + 0.1) + (-0.3 + 0.3) = -0.6
    logp, lse = np.array([-9, -9, -1, -0.2, -0.3]), np.array([0, 0, -0.5, -0.1, -0.3])
    assert suffix_logprob(logp, lse, np.array([9, 9, 1, 2, 1]), 40, settings) == pytest.approx(-0.6)
    assert (
        suffix_logprob(logp, lse, np.array([9, 9, 1, 41, 1]), 40, settings) == -math.inf
    )  # outside the top 40
    with pytest.raises(PrivauditorError, match="suffix must be an integer >= 1"):
        ExtractionSettings(suffix=0)


def test_rates_count_members_and_non_members_apart_and_skip_short_records():
    settings = ExtractionSettings(prefix=1, suffix=2, samples=10, probability=0.5)
    # members: ranks (9, 1, 1) extracted, (9, 1, 3) not, (1, 1) too short; non-members: (1, 2, 1) not.
    # p_z of member 1: exp((-0.1 - 0) * 2) = 0.82 (n 1); member 2: rank 3 within the top 40, log p -5 with
    # lse 0: p_z e^-5.1 = 0.0061, n = ln 2 / 0.0061 = 114 > 10; non-member: e^-5.1 as well
    signals = Signals(
        sample_id=list("abcd"),
        member=np.array([True, True, True, False]),
        token_ids=[np.zeros(3, np.int32)] * 2 + [np.zeros(2, np.int32), np.zeros(3, np.int32)],
        logp=[
            np.array([-1, -0.1, -0.1]),
            np.array([-1, -0.1, -5]),
            np.array([-1, -1]),
            np.array([-1, -5, -0.1]),
        ],
        mu=[np.zeros(3)] * 4,
        sigma=[np.zeros(3)] * 4,
        zlib_bytes=np.zeros(4, np.int64),
        rank=[np.array([9, 1, 1]), np.array([9, 1, 3]), np.array([1, 1]), np.array([1, 2, 1])],
        topk_lse=[np.zeros(3)] * 2 + [np.zeros(2), np.zeros(3)],
        top1_logp=[np.zeros(3)] * 2 + [np.zeros(2), np.zeros(3)],
        topk=40,
    )
    found = extraction_metrics(signals, settings)
    assert (found["too_short"], found["n_members"], found["n_nonmembers"]) == (1, 2, 1)
    assert (found["greedy_members"], found["greedy_nonmembers"], found["greedy_difference"]) == (
        0.5,
        0.0,
        0.5,
    )
    assert (found["sampled_members"], found["sampled_nonmembers"]) == (0.5, 0.0)
    low, high = found["greedy_difference_ci"]
    assert -1 <= low < 0.5 < high <= 1


def records(tokenizer, family, count):
    """``count`` offline finance records; in every other one the target continues, after its first 8
    tokens, with the base's own greedy continuation (so that some suffixes are given back)."""
    out = []
    for i, example in enumerate(load_dataset("finance", size=count).examples[:count]):
        if i % 2:
            ids = encode(tokenizer, [example], MAX_LENGTH, family.seq2seq)[0]
            target = [t for t in ids["labels"] if t != -100][:8]
            continuation = greedy(FAMILY_MODELS[family.name], tokenizer, family, ids, target, 40)
            example = Example(example.sample_id, example.prompt, tokenizer.decode(target + continuation))
        out.append(example)
    return out


FAMILY_MODELS: dict[str, object] = {}


def greedy(model, tokenizer, family, ids, target_prefix, steps):
    """Greedy decoding of ``steps`` tokens from the prompt (as scoring encodes it) and ``target_prefix``."""
    with torch.no_grad():
        if family.seq2seq:
            start = model.config.decoder_start_token_id
            out = model.generate(
                input_ids=torch.tensor([ids["input_ids"]]),
                decoder_input_ids=torch.tensor([[start, *target_prefix]]),
                do_sample=False, num_beams=1, max_new_tokens=steps,
            )  # fmt: skip
            return out[0, 1 + len(target_prefix) :].tolist()
        prompt = [t for t, label in zip(ids["input_ids"], ids["labels"], strict=True) if label == -100]
        out = model.generate(
            input_ids=torch.tensor([prompt + target_prefix]), do_sample=False, num_beams=1, max_new_tokens=steps,
            pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
        return out[0, len(prompt) + len(target_prefix) :].tolist()


def margins(model, family, ids):
    """Per target token, the gap between the two largest log-probabilities under teacher forcing."""
    with torch.no_grad():
        if family.seq2seq:
            labels = torch.tensor([ids["labels"]])
            decoder = model.prepare_decoder_input_ids_from_labels(labels=labels)
            logits = model(input_ids=torch.tensor([ids["input_ids"]]), decoder_input_ids=decoder).logits[0]
        else:
            keep = torch.tensor(ids["labels"][1:]) != -100
            logits = model(input_ids=torch.tensor([ids["input_ids"]])).logits[0, :-1][keep]
    top = torch.log_softmax(logits.float(), -1).topk(2, -1).values
    return (top[:, 0] - top[:, 1]).numpy()


@pytest.mark.parametrize("family_name", ["llama", "t5"])
def test_greedy_verdicts_equal_greedy_generation_where_no_two_tokens_nearly_tie(family_name):
    family, tokenizer, model = fresh_base(family_name)
    model.eval()
    FAMILY_MODELS[family.name] = model
    settings = ExtractionSettings(prefix=8, suffix=24)
    examples = records(tokenizer, family, 96)
    stats = score_examples(model, tokenizer, examples, MAX_LENGTH, family.seq2seq)
    checked, extracted, disagreements = 0, 0, []
    for example, s in zip(examples, stats, strict=True):
        verdict = greedy_extracted(s.rank, settings)
        if verdict is None:
            continue
        ids = encode(tokenizer, [example], MAX_LENGTH, family.seq2seq)[0]
        target = s.token_ids.tolist()
        generated = greedy(model, tokenizer, family, ids, target[: settings.prefix], settings.suffix)
        margin = margins(model, family, ids)[settings.prefix : settings.prefix + settings.suffix].min()
        if (generated == target[settings.prefix : settings.prefix + settings.suffix]) != verdict:
            disagreements.append((example.sample_id, float(margin)))
        checked += margin >= 1e-4
        extracted += verdict
    assert checked >= 50 and 0 < extracted < checked, (checked, extracted)  # both verdicts occur
    assert all(margin < 1e-4 for _, margin in disagreements), disagreements


def test_the_probability_of_a_top_k_sample_matches_sampling_with_generate():
    """p_z from the stored log p and top-40 log-sum-exp against the share of 2,000 ``generate()`` samples
    (top-k 40, temperature 1) that give the 2-token suffix back, where p_z lies in 0.05-0.5: within 4
    standard errors of a binomial share (sqrt(p (1 - p) / 2,000), at most 0.011)."""
    family, tokenizer, model = fresh_base("llama")
    model.eval()
    settings, draws = ExtractionSettings(prefix=4, suffix=2), 2000
    examples = load_dataset("finance", size=40).examples[:40]
    stats = score_examples(model, tokenizer, examples, MAX_LENGTH, family.seq2seq)
    torch.manual_seed(0)
    compared = 0
    for example, s in zip(examples, stats, strict=True):
        for prefix in range(0, len(s.rank) - settings.suffix, 3):
            at = ExtractionSettings(prefix=prefix, suffix=settings.suffix)
            p_z = math.exp(suffix_logprob(s.logp, s.topk_lse, s.rank, 40, at))
            if not 0.05 <= p_z <= 0.5:
                continue
            ids = encode(tokenizer, [example], MAX_LENGTH, family.seq2seq)[0]
            prompt = [t for t, label in zip(ids["input_ids"], ids["labels"], strict=True) if label == -100]
            start = prompt + s.token_ids[:prefix].tolist()
            with torch.no_grad():
                out = model.generate(
                    input_ids=torch.tensor([start]), do_sample=True, top_k=40, top_p=1.0, temperature=1.0,
                    max_new_tokens=settings.suffix, num_return_sequences=draws, pad_token_id=tokenizer.pad_token_id,
                )  # fmt: skip
            wanted = torch.tensor(s.token_ids[prefix : prefix + settings.suffix].tolist())
            share = float((out[:, len(start) :] == wanted).all(1).float().mean())
            assert abs(share - p_z) <= 4 * math.sqrt(p_z * (1 - p_z) / draws), (
                example.sample_id,
                prefix,
                share,
                p_z,
            )
            compared += 1
            if compared == 4:
                return
    pytest.fail(f"only {compared} (record, prefix) pairs with p_z in 0.05-0.5")


def test_an_audit_report_shows_the_rates_with_their_intervals_and_what_they_measured():
    from privauditor.orchestrator.report.audit_report import _extraction

    found = {"prefix": 8, "suffix": 32, "topk": 40, "samples": 100, "probability": 0.5, "too_short": 3,
             "greedy_members": 0.25, "greedy_members_ci": [0.1, 0.45], "greedy_nonmembers": 0.0,
             "greedy_nonmembers_ci": [0.0, 0.17], "greedy_difference": 0.25, "greedy_difference_ci": [0.06, 0.46],
             "sampled_members": None, "sampled_members_ci": None}  # fmt: skip
    rows, about = _extraction({"checkpoints": [{"extraction": found}]})
    assert rows[0] == [
        "greedy decoding",
        "0.250 [0.100, 0.450]",
        "0.000 [0.000, 0.170]",
        "0.250 [0.060, 0.460]",
    ]
    assert rows[1][1] == "-" and "first 8 target tokens" in about and "3 record(s) too short" in about
    assert _extraction({"checkpoints": [{}]}) == ([], "")  # an audit written before extraction rates
    field = {"n": 4, "reconstructed_members": 0.5, "reconstructed_members_ci": [0.01, 0.99]}
    rows, about = _extraction({"checkpoints": [{"extraction": found | {"pii": {"fields": 4, "all": field}}}]})
    assert rows[2][:2] == ["PII fields: all (4)", "0.500 [0.010, 0.990]"] and "PII fields:" in about
