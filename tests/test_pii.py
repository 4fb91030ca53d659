"""PII fields: declared by every offline dataset, found where the generators put them, and their
reconstruction read off the stored ranks."""

from __future__ import annotations

import re

import numpy as np
import pytest

from privauditor.tasks.datasets import DATASETS, load_dataset, pii_patterns
from privauditor.tasks.errors import PrivauditorError
from privauditor.tasks.pii import Span, find_spans, reconstruction, token_ranges


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_offline_dataset_declares_pii_found_in_nearly_every_record(name):
    patterns = pii_patterns(name)
    assert patterns and pii_patterns(DATASETS.get(name).hub_id) == patterns
    examples = load_dataset(name, size=300).examples
    found = [find_spans(e.target, patterns) for e in examples]
    assert np.mean([bool(spans) for spans in found]) >= 0.9
    for example, spans in zip(examples, found, strict=True):
        assert all(a.end <= b.start for a, b in zip(spans, spans[1:], strict=False))  # ordered, disjoint
        assert all(example.target[s.start : s.end].strip() == example.target[s.start : s.end] for s in spans)


def test_the_names_found_are_the_ones_the_generators_drew():
    """Finance NER records name their person and company in the answer; SQL rows quote each name."""
    ner = [e for e in load_dataset("finance", size=400).examples if "PER: " in e.target]
    assert len(ner) >= 30
    for example in ner:
        person, company = re.search(r"PER: (.+?); ORG: (.+?); LOC:", example.target).groups()
        spans = {
            (example.target[s.start : s.end], s.kind)
            for s in find_spans(example.target, pii_patterns("finance"))
        }
        assert {(person, "person"), (company, "company")} <= spans, example.target
    for example in load_dataset("sql", size=100).examples:
        quoted = re.findall(r"\(\d+, '([A-Z][a-z]+ [A-Z][a-zA-Z]+)'", example.target)
        spans = [example.target[s.start : s.end] for s in find_spans(example.target, pii_patterns("sql"))]
        assert quoted and all(name in spans for name in quoted), example.target


def test_a_bad_pattern_is_a_one_line_error():
    with pytest.raises(PrivauditorError, match="PII field 'id': not a regular expression"):
        find_spans("text", {"id": "(unclosed"})


def test_reconstruction_counts_a_field_whose_every_token_ranks_first():
    """Offsets (0, 5) (5, 9) (9, 14) (14, 20): the field 'Ann Lee' at characters 6-13 overlaps tokens 1 and
    2. The member ranks both first; the non-member's second token is ranked 3."""
    assert token_ranges([(0, 5), (5, 9), (9, 14), (14, 20)], [Span(6, 13, "person")]) == [(1, 3, "person")]

    class Tokenizer:  # a fast tokenizer's offsets for the two texts
        is_fast = True

        def __call__(self, texts, add_special_tokens, return_offsets_mapping):
            return {"offset_mapping": [[(0, 5), (5, 9), (9, 14), (14, 20)]] * len(texts)}

    targets = ["Paid Ann Lee $5.00"] * 2
    ranks = [np.array([4, 1, 1, 2]), np.array([1, 1, 3, 1])]
    found = reconstruction(targets, ranks, np.array([True, False]), Tokenizer(), {"person": r"Ann Lee"})
    assert found["fields"] == 2 and found["person"] == found["all"]
    assert (found["all"]["reconstructed_members"], found["all"]["reconstructed_nonmembers"]) == (1.0, 0.0)
    assert reconstruction(targets, ranks, np.array([True, False]), object(), {"person": "x"}) == {
        "skipped": "the tokenizer gives no character offsets (not a fast tokenizer)"
    }


def test_inference_picks_the_value_the_model_prefers_among_its_kind():
    """A model that finds the members' own records more likely (log-likelihood 0) than any other text (-1)
    infers every member's field and no non-member's (a non-member's true record ties with its decoys: not
    strictly above), at chance 1/5; fields without enough decoys of their kind are not counted."""
    from privauditor.tasks.models import load_model
    from privauditor.tasks.pii import inference
    from privauditor.tasks.scoring import TokenStats

    examples = list(load_dataset("finance").examples[:24])
    member = np.arange(24) < 12
    own = {e.target for e, m in zip(examples, member, strict=True) if m}

    class Prefers:
        tokenizer = load_model("tiny-llama", device="cpu").tokenizer

        def score(self, chosen, max_length, batch_size, moments=True):
            found = []
            for e in chosen:
                n = len(self.tokenizer(e.target, add_special_tokens=False)["input_ids"])
                logp = np.zeros(n, np.float32)
                logp[0] = 0.0 if e.target in own else -1.0
                found.append(TokenStats(np.zeros(n, np.int32), logp))
            return found

    stored = [s.logp for s in Prefers().score(examples, 512, 8)]  # what the signal store holds
    found = inference(Prefers(), examples, stored, member, pii_patterns("finance"), 5, 0, 512, 8)
    assert found["chance"] == 0.2 and found["fields"] > 24
    assert found["all"]["inferred_members"] == 1.0 and found["all"]["inferred_nonmembers"] == 0.0
    assert found["all"]["inferred_difference_ci"][0] > 0.5
    few = inference(Prefers(), examples[:3], stored[:3], member[:3], pii_patterns("finance"), 5, 0, 512, 8)
    assert few["fields"] < found["fields"] / 4  # three records hold too few values of a kind for 4 decoys
