"""PII fields: declared by every offline dataset, found where the generators put them, and their
reconstruction read off the stored ranks."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from privauditor.tasks.datasets import DATASETS, load_dataset, pii_patterns
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.leakage.pii import Span, find_spans, reconstruction, token_ranges


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
    from privauditor.tasks.leakage.pii import inference
    from privauditor.tasks.models import load_model
    from privauditor.tasks.passes.signal_table import TokenStats

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

    class Scoresnothing(Prefers):  # records with no field at all: nothing to score, no call to score
        def score(self, chosen, max_length, batch_size, moments=True):
            assert chosen, "scored an empty list (a tokenizer raises on it)"
            return super().score(chosen, max_length, batch_size, moments)

    none = inference(
        Scoresnothing(), examples[:1], stored[:1], member[:1], {"x": "no such field"}, 5, 0, 512, 8
    )
    assert none["fields"] == 0 and none["too_few_decoys"] == 0


PERSON = {"person": r"(?:Paid|to) ([A-Z][a-z]+ [A-Z][a-z]+\d+)"}


def _records(prefix: str, count: int):
    """``count`` records of two fields each, whose values all start with ``prefix`` (distinct per side)."""
    from privauditor.tasks.datasets import Example

    return [
        Example(f"{prefix}{i}", "Pay:", f"Paid {prefix} Ber{i} to {prefix} Kin{i} today.")
        for i in range(count)
    ]


class _Recording:
    """A scorer over a whitespace tokenizer (fast, with offsets) that keeps every text it is asked to score
    and finds the records it was given (``own``) more likely than any other text."""

    def __init__(self, own=()):
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        words = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        words.pre_tokenizer = pre_tokenizers.Whitespace()
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=words)
        self.own, self.seen = {e.target for e in own}, []

    def score(self, chosen, max_length, batch_size, moments=True):
        from privauditor.tasks.passes.signal_table import TokenStats

        self.seen += list(chosen)
        found = []
        for e in chosen:
            n = len(self.tokenizer(e.target, add_special_tokens=False)["input_ids"])
            logp = np.full(n, -1.0, np.float32)
            logp[0] = 0.0 if e.target in self.own else -1.0
            found.append(TokenStats(np.zeros(n, np.int32), logp))
        return found


def _decoys(scorer, examples, member):
    """(member side, decoy value) of every decoy text ``scorer`` was asked to score: the value its record
    does not hold."""
    records = {
        e.sample_id: (bool(m), set(re.findall(PERSON["person"], e.target)))
        for e, m in zip(examples, member, strict=True)
    }
    found = []
    for e in scorer.seen:
        side, own = records[e.sample_id.rsplit("-", 1)[0]]
        found += [(side, value) for value in re.findall(PERSON["person"], e.target) if value not in own]
    return found


def _infer(scorer, examples, member, seed, **extra):
    from privauditor.tasks.leakage.pii import inference

    stored = [s.logp for s in scorer.score(examples, 512, 8)]
    scorer.seen.clear()
    return inference(scorer, examples, stored, member, PERSON, 4, seed, 512, 8, **extra)


def test_decoys_never_hold_a_member_value():
    """Members' values are distinct ("Mem ..."); over 20 seeds no decoy a member's or a non-member's field
    is scored against is one of them (drawn from every scored record, as before, a memorised member value
    would beat a non-member's true value and lower the non-members' baseline)."""
    examples = [*_records("Mem", 10), *_records("Non", 10)]
    member = np.arange(20) < 10
    member_values = {v for e in examples[:10] for v in re.findall(PERSON["person"], e.target)}
    drawn = []
    for seed in range(20):
        scorer = _Recording(examples[:10])
        found = _infer(scorer, examples, member, seed)
        assert found["fields"] == 40
        drawn += _decoys(scorer, examples, member)
    assert not {value for _, value in drawn} & member_values
    assert len(drawn) == 20 * 40 * 3  # every decoy a value of no record of the field's
    assert found["all"]["inferred_members"] == 1.0 and found["all"]["inferred_nonmembers"] == 0.0
    assert found["too_few_decoys"] == 0


def test_members_and_nonmembers_draw_from_one_pool_of_untrained_values():
    """The pool is the non-members' and the population's values less any trained record's (a known member
    shares one with the population); members' and non-members' fields draw from it alike, and never a
    field's own record's values."""
    members, nonmembers, population = _records("Mem", 6), _records("Non", 6), _records("Pop", 4)
    from privauditor.tasks.datasets import Example

    known = [Example("k", "Pay:", "Paid Kno Ber0 to Pop Kin0 today.")]  # trained: Pop Kin0 is never a decoy
    examples, member = [*members, *nonmembers], np.arange(12) < 6
    pool = {v for e in [*nonmembers, *population] for v in re.findall(PERSON["person"], e.target)}
    pool -= {"Pop Kin0"}
    drawn = []
    for seed in range(40):
        scorer = _Recording()
        found = _infer(scorer, examples, member, seed, population=population, trained=known, resamples=200)
        drawn += _decoys(scorer, examples, member)
    assert found["pool"] == {"person": len(pool)} == {"person": 19}
    assert {v for m, v in drawn if m} == {v for m, v in drawn if not m} == pool
    for e in scorer.seen:  # the last seed's: no decoy of a field is a value of its own record
        record = next(r for r in examples if r.sample_id == e.sample_id.rsplit("-", 1)[0])
        values = re.findall(PERSON["person"], record.target)
        assert sum(v in values for v in re.findall(PERSON["person"], e.target)) == 1  # the field kept
    assert found["interval"] == {"method": "percentile bootstrap over records", "level": 0.95,
                                 "resamples": 200, "seed": 39}  # fmt: skip
    assert (found["all"]["records_members"], found["all"]["records_nonmembers"]) == (6, 6)


def test_record_level_bootstrap_covers_where_field_level_intervals_do_not():
    """Six fields per record, all inferred or none (perfectly correlated), 40 records a side, rates 0.5 and
    0.3: over 200 simulated cells the record-level bootstrap's 95 % intervals cover the members' and
    non-members' rates and their difference at least 88 % of the time; the field-level intervals (fields
    as independent: Clopper-Pearson and Newcombe, tasks/stats/metrics.py's ``rates``) cover them far less."""
    from privauditor.tasks.leakage.pii import record_rates
    from privauditor.tasks.stats.metrics import rates

    rng = np.random.default_rng(0)
    truth = {"members": 0.5, "nonmembers": 0.3, "difference": 0.2}
    covered = {"record": [], "field": []}
    member = np.repeat(np.arange(80) < 40, 6)
    record = np.repeat(np.arange(80), 6)
    for sim in range(200):
        verdicts = np.repeat(rng.random(80) < np.where(np.arange(80) < 40, 0.5, 0.3), 6)
        for how, found in (
            ("record", record_rates("x", verdicts, member, record, 500, sim)),
            ("field", rates("x", verdicts, member)),
        ):
            covered[how].append(
                [found[f"x_{k}_ci"][0] <= v <= found[f"x_{k}_ci"][1] for k, v in truth.items()]
            )
    record_cover, field_cover = np.mean(covered["record"], axis=0), np.mean(covered["field"], axis=0)
    print("coverage (members, non-members, difference): record", record_cover, "field", field_cover)
    assert (record_cover >= 0.88).all(), record_cover
    assert (field_cover <= 0.75).all(), field_cover


def test_the_audit_page_says_where_the_decoys_came_from_and_how_the_intervals_were_drawn():
    """The pool and interval settings are stated, not rendered as kinds; each kind's row counts its fields
    and the records they cluster in."""
    from privauditor.orchestrator.report.audit_report import _extraction

    examples, member = [*_records("Mem", 6), *_records("Non", 6)], np.arange(12) < 6
    inferred = _infer(_Recording(examples[:6]), examples, member, 3, resamples=300)
    found = {"prefix": 8, "suffix": 32, "topk": 40, "samples": 100, "probability": 0.5, "too_short": 0,
             "pii_inference": inferred}  # fmt: skip
    rows, about = _extraction({"checkpoints": [{"extraction": found}]})
    assert [row[:2] for row in rows[2:]] == [
        ["PII inferred: all (24 fields of 12 records)", "1.000 [1.000, 1.000]"],
        ["PII inferred: person (24 fields of 12 records)", "1.000 [1.000, 1.000]"],
    ]
    assert "decoys drawn from the values of the non-members' and population's records" in about
    assert "95 % record-level bootstrap (300 resamples of the records" in about and "seed 3" in about
    old = {k: v for k, v in inferred.items() if k not in ("decoys", "pool", "interval")}
    assert (
        "members' included"
        in _extraction({"checkpoints": [{"extraction": found | {"pii_inference": old}}]})[1]
    )


def test_cells_that_infer_pii_carry_its_version_in_their_id_and_others_keep_theirs(monkeypatch):
    """``pii_inference_version`` joins the hashed spec only with ``score.pii_candidates``: cells measured
    with the old decoys get new ids, cells without inference keep theirs; cell.json's config reads back."""
    from privauditor.tasks.leakage import pii
    from privauditor.tasks.spec.config import cell_config
    from privauditor.tasks.spec.resolved import CellSpec

    small = ["split={members: 4, nonmembers: 4, validation: 2}", "attacks=[loss]"]
    base = {"model": "yahma/llama-7b-hf", "adaptation": "lora", "dataset": "finance"}  # nothing to build
    plain = cell_config(base, small).resolve(build=False)
    inferring = cell_config(base, [*small, "score.pii_candidates=4"]).resolve(build=False)
    assert plain.complete and inferring.complete  # final ids, not ????????
    assert "pii_inference_version" not in plain.to_dict()
    assert inferring.to_dict()["pii_inference_version"] == pii.INFERENCE_VERSION == 2
    assert CellSpec.from_dict(json.loads(json.dumps(inferring.to_dict()))) == inferring
    monkeypatch.setattr(pii, "INFERENCE_VERSION", 3)
    assert cell_config(base, small).resolve(build=False).cell_id() == plain.cell_id()
    assert (
        cell_config(base, [*small, "score.pii_candidates=4"]).resolve(build=False).cell_id()
        != inferring.cell_id()
    )
