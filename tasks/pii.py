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
(``privauditor.tasks.metrics.rates``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import PrivauditorError


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


def _by_kind(name: str, fields: Sequence[tuple[str, bool, bool]]) -> dict[str, Any]:
    """Over all kinds and per kind (``fields``: kind, verdict, member), ``rates`` of the verdicts with the
    number of fields."""
    from .metrics import rates

    out: dict[str, Any] = {}
    for kind in ("all", *dict.fromkeys(k for k, _, _ in fields)):
        chosen = [f for f in fields if kind in ("all", f[0])]
        verdicts, sides = np.array([f[1] for f in chosen], bool), np.array([f[2] for f in chosen], bool)
        out[kind] = {"n": len(chosen)} | rates(name, verdicts, sides)
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
    fields = [
        (span.kind, bool((np.asarray(ranks[i][first:last]) == 1).all()), bool(member[i]))
        for i, span, first, last in _scored_fields(targets, [len(r) for r in ranks], tokenizer, patterns)
    ]
    return {"fields": len(fields)} | _by_kind("reconstructed", fields)


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
) -> dict[str, Any]:
    """**Inference** (Lukas et al., S&P 2023, "Analyzing leakage of personally identifiable information in
    language models", its PII inference): the attacker knows a record with one field hidden and
    ``candidates`` values of the field's kind, the true one among them, and picks the value whose filled-in
    record the model finds most likely (the whole target's log-likelihood: ``logp``, the records' stored
    per-token log p, for the true value). Decoys are other values of the same kind found in the scored
    records, drawn with ``seed``; a field is inferred when the true value scores strictly above every decoy
    (chance: 1 / ``candidates``). Per kind and over all, members against non-members as for
    reconstruction; fields with fewer than ``candidates`` - 1 distinct decoys, or cut off by the scored
    length, are not counted. One pass per decoy text."""
    from .datasets import Example

    if not getattr(scorer.tokenizer, "is_fast", False):
        return dict(NOT_FAST)
    targets = [e.target for e in examples]
    found = list(_scored_fields(targets, [len(x) for x in logp], scorer.tokenizer, patterns))
    pools: dict[str, set[str]] = {}  # every value found in the records, scored to its end or not
    for text in targets:
        for span in find_spans(text, patterns):
            pools.setdefault(span.kind, set()).add(text[span.start : span.end])
    rng = np.random.default_rng(seed)
    fields, texts = [], []  # (kind, member, own total, where its decoys' totals start)
    for i, span, _, _ in found:
        e = examples[i]
        pool = sorted(pools[span.kind] - {e.target[span.start : span.end]})
        if len(pool) < candidates - 1:
            continue
        decoys = rng.choice(len(pool), candidates - 1, replace=False)
        fields.append((span.kind, bool(member[i]), float(logp[i].sum(dtype=np.float64)), len(texts)))
        texts += [Example(f"{e.sample_id}-{j}", e.prompt, e.target[: span.start] + pool[d] + e.target[span.end :])
                  for j, d in enumerate(decoys)]  # fmt: skip
    totals = [
        s.logp.sum(dtype=np.float64) for s in scorer.score(texts, max_length, batch_size, moments=False)
    ]
    verdicts = [
        (kind, own > max(totals[at : at + candidates - 1]), is_member) for kind, is_member, own, at in fields
    ]
    return {"candidates": candidates, "chance": 1 / candidates, "fields": len(fields)} | _by_kind(
        "inferred", verdicts
    )
