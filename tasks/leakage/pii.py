"""PII fields of a record, and how often an adapted model reconstructs them.

A dataset plugin declares the fields its records hold (``DatasetPlugin.pii``): kind → a regular
expression over the rendered target whose first group (or whole match, without a group) is the value.
Two placeholders stand for the values the offline generators draw from Faker's en_US lists:
``{person}`` (a first and a last name) and ``{company}`` (Faker's three company formats), so a declared
name is one the generator could have drawn, not any two capitalised words. Kinds are matched in their
declared order; a span overlapping an earlier one is dropped.

**Reconstruction** (the "reconstruction" of LLM-PBE and Lukas et al., S&P 2023, under teacher forcing): a
field is reconstructed when the model, given the record's text before it, ranks every one of its tokens
first: greedy decoding from that point writes the value. Read off the stored ranks, no pass; the
tokens of a field are those whose characters overlap it (offsets from the tokenizer that scored the
text). Rates are over fields, per kind, members against non-members, as for extraction
(``privauditor.tasks.stats.metrics.rates``).

**Inference** (:func:`inference`): a hidden field's true value against decoys of its kind drawn from
records never trained on (:func:`decoy_pool`), with record-level bootstrap intervals
(:func:`record_rates`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..infra.errors import PrivauditorError


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str


@lru_cache(maxsize=1)
def _faker_names() -> dict[str, str]:
    """The placeholders' patterns from Faker's en_US person and company lists (longest names first, so a
    name is never matched by a prefix of it)."""
    from faker.providers.company.en_US import Provider as Company
    from faker.providers.person.en_US import Provider as Person

    def alternation(names) -> str:
        return "|".join(re.escape(n) for n in sorted(set(names), key=lambda n: (-len(n), n)))

    first = alternation([*Person.first_names_female, *Person.first_names_male, *Person.first_names])
    last = alternation(Person.last_names)
    suffixes = alternation(Company.company_suffixes)
    company = rf"(?:{last}), (?:{last}) and (?:{last})|(?:{last})-(?:{last})|(?:{last}) (?:{suffixes})"
    return {"person": rf"\b(?:{first}) (?:{last})\b", "company": rf"\b(?:{company})\b"}


@lru_cache(maxsize=32)
def _compiled(patterns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern], ...]:
    names = _faker_names() if any("{person}" in p or "{company}" in p for _, p in patterns) else {}
    found = []
    for kind, pattern in patterns:
        for placeholder, value in names.items():
            pattern = pattern.replace("{" + placeholder + "}", value)
        try:
            found.append((kind, re.compile(pattern)))
        except re.error as error:
            raise PrivauditorError(f"PII field {kind!r}: not a regular expression ({error})") from None
    return tuple(found)


def check_patterns(patterns: Mapping[str, str]) -> None:
    """A one-line error unless every pattern compiles (placeholders expanded)."""
    _compiled(tuple(patterns.items()))


def find_spans(text: str, patterns: Mapping[str, str]) -> list[Span]:
    """The PII fields of ``text`` by kind, in text order; a field overlapping an earlier kind's is dropped."""
    return list(_spans(text, tuple(patterns.items())))


@lru_cache(maxsize=8192)  # a cell's checkpoints score the same texts
def _spans(text: str, patterns: tuple[tuple[str, str], ...]) -> tuple[Span, ...]:
    spans: list[Span] = []
    for kind, pattern in _compiled(patterns):
        for match in pattern.finditer(text):
            start, end = match.span(1) if pattern.groups else match.span()
            if start < end and not any(s.start < end and start < s.end for s in spans):
                spans.append(Span(start, end, kind))
    return tuple(sorted(spans, key=lambda s: s.start))


def token_ranges(offsets: Sequence[tuple[int, int]], spans: Sequence[Span]) -> list[tuple[int, int, str]]:
    """Each span's tokens as [first, last + 1) from the tokens' character ``offsets``."""
    bounds = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    overlaps = [(bounds[:, 0] < span.end) & (span.start < bounds[:, 1]) for span in spans]
    return [
        (int(inside.argmax()), len(inside) - int(inside[::-1].argmax()), span.kind)
        for span, inside in zip(spans, overlaps, strict=True)
        if inside.any()
    ]


def _scored_fields(
    targets: Sequence[str], lengths: Sequence[int], tokenizer: Any, patterns: Mapping[str, str]
):
    """Each field of each target whose tokens all lie within that target's ``lengths`` scored tokens:
    (record index, span, first token, last token + 1), offsets from ``tokenizer`` (a fast one)."""
    encoded = tokenizer(list(targets), add_special_tokens=False, return_offsets_mapping=True)
    for i, (text, offsets, length) in enumerate(
        zip(targets, encoded["offset_mapping"], lengths, strict=True)
    ):
        for span in find_spans(text, patterns):
            reach = token_ranges(offsets, [span])
            if reach and reach[0][1] <= length:
                yield i, span, reach[0][0], reach[0][1]


def _by_kind(kinds: Sequence[str], measure: Any) -> dict[str, Any]:
    """Over all kinds and per kind of the fields (``kinds``: each field's), the number of fields and
    ``measure(chosen)`` of a boolean mask choosing them."""
    kinds = np.array(kinds, dtype=object)
    out: dict[str, Any] = {}
    for kind in ("all", *dict.fromkeys(kinds.tolist())):
        chosen = np.ones(len(kinds), bool) if kind == "all" else kinds == kind
        out[kind] = {"n": int(chosen.sum())} | measure(chosen)
    return out


NOT_FAST = {"skipped": "the tokenizer gives no character offsets (not a fast tokenizer)"}


def reconstruction(
    targets: Sequence[str],
    ranks: Sequence[np.ndarray],
    member: np.ndarray,
    tokenizer: Any,
    patterns: Mapping[str, str],
) -> dict[str, Any]:
    """Per kind and over all kinds, the members' and non-members' rates of fields whose every token is
    ranked first, their difference with its interval, and the fields counted; a field cut off by the
    scored length is not counted."""
    if not getattr(tokenizer, "is_fast", False):
        return dict(NOT_FAST)
    from ..stats.metrics import rates

    fields = [
        (span.kind, bool((np.asarray(ranks[i][first:last]) == 1).all()), bool(member[i]))
        for i, span, first, last in _scored_fields(targets, [len(r) for r in ranks], tokenizer, patterns)
    ]
    verdicts, sides = np.array([f[1] for f in fields], bool), np.array([f[2] for f in fields], bool)

    def measure(chosen: np.ndarray) -> dict[str, Any]:
        return rates("reconstructed", verdicts[chosen], sides[chosen])

    return {"fields": len(fields)} | _by_kind([f[0] for f in fields], measure)


#: bumped whenever a change alters what ``inference`` writes (the spec carries it while ``score.pii_candidates``
#: is set, so cells measured the old way are not mixed with new ones). 2: decoys from records never trained
#: on, intervals by a record-level bootstrap.
INFERENCE_VERSION = 2

#: the level of the record-level bootstrap intervals
LEVEL = 0.95


def decoy_pool(
    patterns: Mapping[str, str], untrained: Sequence[str], trained: Sequence[str]
) -> dict[str, list[str]]:
    """Per kind, the decoys' pool: every value found in the ``untrained`` texts (non-members, population)
    less every value found in a ``trained`` one (members, known members, included canaries), sorted. A
    value a training record holds is never a decoy: once the model memorises it, it would beat the true
    value of a non-member's field and lower the non-members' baseline."""
    seen = {text[s.start : s.end] for text in trained for s in find_spans(text, patterns)}
    pool: dict[str, set[str]] = {}
    for text in untrained:
        for span in find_spans(text, patterns):
            if (value := text[span.start : span.end]) not in seen:
                pool.setdefault(span.kind, set()).add(value)
    return {kind: sorted(values) for kind, values in pool.items()}


def record_rates(
    name: str, verdicts: np.ndarray, member: np.ndarray, record: np.ndarray, resamples: int, seed: int
) -> dict[str, Any]:
    """``<name>_members`` / ``_nonmembers`` (fields' rates) and ``<name>_difference``, each with a ``LEVEL``
    percentile interval from a bootstrap that resamples records (``record``: each field's), all fields
    of one together (the cluster bootstrap, Davison & Hinkley 1997, "Bootstrap Methods and their
    Application", section 3.8, hierarchical data: resample the clusters; fields of one record are not
    independent). Members' and non-members' records are resampled independently (stratified, as
    tasks/stats/metrics.py's AUC bootstrap); the difference's interval is the percentiles of the resamples'
    differences. None where a side has no record."""
    rng = np.random.default_rng(seed)
    tail = (1 - LEVEL) / 2 * 100
    out: dict[str, Any] = {}
    drawn = {}
    for side, chosen in (("members", member), ("nonmembers", ~member)):
        ids, at = np.unique(record[chosen], return_inverse=True)
        hits = np.bincount(at, weights=verdicts[chosen].astype(np.float64), minlength=len(ids))
        count = np.bincount(at, minlength=len(ids)).astype(np.float64)
        out[f"records_{side}"] = len(ids)
        if not len(ids):
            out[f"{name}_{side}"] = out[f"{name}_{side}_ci"] = None
            continue
        pick = rng.integers(0, len(ids), size=(resamples, len(ids)))
        drawn[side] = hits[pick].sum(axis=1) / count[pick].sum(axis=1)
        out[f"{name}_{side}"] = float(hits.sum() / count.sum())
        out[f"{name}_{side}_ci"] = [float(v) for v in np.percentile(drawn[side], [tail, 100 - tail])]
    if len(drawn) == 2:
        out[f"{name}_difference"] = out[f"{name}_members"] - out[f"{name}_nonmembers"]
        difference = drawn["members"] - drawn["nonmembers"]
        out[f"{name}_difference_ci"] = [float(v) for v in np.percentile(difference, [tail, 100 - tail])]
    else:
        out[f"{name}_difference"] = out[f"{name}_difference_ci"] = None
    return out


def inference(  # noqa: PLR0913  # a scorer, its records and plain numbers, as score_examples takes them
    scorer: Any,
    examples: Sequence[Any],
    logp: Sequence[np.ndarray],
    member: np.ndarray,
    patterns: Mapping[str, str],
    candidates: int,
    seed: int,
    max_length: int,
    batch_size: int,
    population: Sequence[Any] = (),
    trained: Sequence[Any] = (),
    resamples: int = 1000,
) -> dict[str, Any]:
    """**Inference** (Lukas et al., S&P 2023, "Analyzing leakage of personally identifiable information in
    language models", its PII inference): the attacker knows a record with one field hidden and
    ``candidates`` values of the field's kind, the true one among them, and picks the value whose filled-in
    record the model finds most likely (the whole target's log-likelihood: ``logp``, the records' stored
    per-token log p, for the true value). A field is inferred when the true value scores strictly above
    every decoy (chance: 1 / ``candidates``).

    Decoys are drawn with ``seed`` from one pool per kind, the same for members and non-members
    (:func:`decoy_pool`): the values of the non-members' and the ``population``'s records, less every value
    of a member's or another ``trained`` record (known members, included canaries), and less the values of
    the field's own record. A field whose kind's pool holds fewer than ``candidates`` - 1 such values is
    not counted (``too_few_decoys``), nor is one cut off by the scored length; with none counted on a side
    its rates are None. Per kind and over all, members' and non-members' rates and their difference, with
    95 % percentile intervals over ``resamples`` record-level bootstrap resamples seeded by ``seed``
    (:func:`record_rates`). One pass per decoy text."""
    from ..datasets import Example

    if not getattr(scorer.tokenizer, "is_fast", False):
        return dict(NOT_FAST)
    targets = [e.target for e in examples]
    found = list(_scored_fields(targets, [len(x) for x in logp], scorer.tokenizer, patterns))
    member = np.asarray(member, dtype=bool)
    untrained = [t for t, m in zip(targets, member, strict=True) if not m] + [e.target for e in population]
    trained_texts = [t for t, m in zip(targets, member, strict=True) if m] + [e.target for e in trained]
    pools = decoy_pool(patterns, untrained, trained_texts)
    rng = np.random.default_rng(seed)
    held = {i: {targets[i][s.start : s.end] for s in find_spans(targets[i], patterns)} for i, *_ in found}
    fields, texts, too_few = [], [], 0  # (kind, member, record, own total, where its decoys' totals start)
    for i, span, _, _ in found:
        e = examples[i]
        pool = [value for value in pools.get(span.kind, ()) if value not in held[i]]  # not its own record's
        if len(pool) < candidates - 1:
            too_few += 1
            continue
        decoys = rng.choice(len(pool), candidates - 1, replace=False)
        fields.append((span.kind, bool(member[i]), i, float(logp[i].sum(dtype=np.float64)), len(texts)))
        texts += [Example(f"{e.sample_id}-{j}", e.prompt, e.target[: span.start] + pool[d] + e.target[span.end :])
                  for j, d in enumerate(decoys)]  # fmt: skip
    scored = scorer.score(texts, max_length, batch_size, moments=False) if texts else []  # no field: none
    totals = [s.logp.sum(dtype=np.float64) for s in scored]
    inferred = np.array([own > max(totals[at : at + candidates - 1]) for _, _, _, own, at in fields], bool)
    sides = np.array([f[1] for f in fields], bool)
    records = np.array([f[2] for f in fields], np.int64)
    out: dict[str, Any] = {
        "candidates": candidates,
        "chance": 1 / candidates,
        "fields": len(fields),
        "too_few_decoys": too_few,
        "decoys": "values of the non-members' and population's records, none of a trained record's",
        "pool": {kind: len(values) for kind, values in pools.items()},
        "interval": {"method": "percentile bootstrap over records", "level": LEVEL, "resamples": resamples,
                     "seed": seed},
    }  # fmt: skip

    def measure(chosen: np.ndarray) -> dict[str, Any]:
        return record_rates("inferred", inferred[chosen], sides[chosen], records[chosen], resamples, seed)

    return out | _by_kind([f[0] for f in fields], measure)
