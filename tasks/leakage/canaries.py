"""Canaries and their exposure (Carlini et al. 2019, "The Secret Sharer", https://arxiv.org/abs/1802.08232).

A canary is a record of a fixed format holding a random secret, "The account number of <name> is
<d d ... d>" (digits apart, so each candidate secret is the same kind of tokens), inserted ``r`` times
into what an adaptation trains on, for each ``r`` of ``repeats``. Its **exposure** is

    exposure = log2 |R| - log2 rank

where R is the format's candidate secrets (10^digits) and ``rank`` the true secret's rank among them when
ordered by the model's log-probability of the secret after the canary's text before it (1: the model
prefers the true secret to every other; ties share the better rank). A model that never saw the canary
ranks it uniformly at random: exposure averages 1/ln 2 = 1.44 bits (:func:`null_quantile` gives the
distribution of a mean over canaries); a memorised canary reaches log2 |R|.

- **exact** where |R| <= ``exact_limit``: every candidate is scored (one batched forward pass each);
- **estimated** elsewhere, by the paper's distribution fit (its section 4.3, "Approximation"): the
  log-perplexities (-log2 of the secret's probability) of ``samples`` random candidates are fitted with a
  skew-normal distribution (``scipy.stats.skewnorm.fit``), and exposure = -log2 CDF(the true secret's
  log-perplexity), at most log2 |R|.

Canaries are a split part of their own (:class:`privauditor.tasks.data.splits.Split`): trained on (those
``included``), never scored by an attack. Each is included with probability ``inclusion`` (1 by default;
below 1 the others, never trained on, are the run's own null, what a DP audit compares with). Their text
is drawn from the cell's seed and never leaves the process: ``extraction.json``'s ``exposure`` holds
numbers only.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..datasets import Example
from ..infra.errors import PrivauditorError

#: the canaries' formats: the text before the secret (``{person}``: a Faker en_US first and last name)
KINDS = {"account": "The account number of {person} is"}
#: canaries without a secret, for the one-run DP audit (:mod:`privauditor.tasks.leakage.audit_canaries`)
AUDIT_KINDS = ("record", "random", "designed")


@dataclass(frozen=True)
class CanarySettings:
    """``split.canaries``: ``count`` canaries of each ``kind`` (one name or a list) for each entry of
    ``repeats`` (how many times each is trained), secrets of ``digits`` digits; ``inclusion``: the
    probability that a canary is inserted at all; exposure exact up to ``exact_limit`` candidates, else
    estimated from ``samples``. ``account`` canaries measure exposure; the :data:`AUDIT_KINDS` (no secret)
    are the one-run DP audit's, which needs ``inclusion`` 0.5 and reads the canaries trained once."""

    kind: str | tuple[str, ...] = "account"
    count: int = 4
    repeats: tuple[int, ...] = (1, 2, 4, 8, 16)
    digits: int = 3
    inclusion: float = 1.0
    exact_limit: int = 1000
    samples: int = 1000

    def __post_init__(self) -> None:
        kinds = self.kinds
        known = (*KINDS, *AUDIT_KINDS)
        if not kinds or any(k not in known for k in kinds) or len(set(kinds)) < len(kinds):
            raise PrivauditorError(
                f"split.canaries.kind must be one or more of {', '.join(known)}, not {self.kind!r}"
            )
        object.__setattr__(self, "kind", kinds[0] if len(kinds) == 1 else kinds)
        for name, low in (("count", 1), ("digits", 1), ("exact_limit", 1), ("samples", 10)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise PrivauditorError(f"split.canaries.{name} must be an integer >= {low}, not {value!r}")
        if self.digits > 18:
            raise PrivauditorError(f"split.canaries.digits must be at most 18, not {self.digits}")
        repeats = tuple(self.repeats)
        if not repeats or any(not isinstance(r, int) or isinstance(r, bool) or r < 1 for r in repeats):
            raise PrivauditorError(
                f"split.canaries.repeats must be counts of at least 1, not {list(repeats)}"
            )
        object.__setattr__(self, "repeats", repeats)
        if not 0 < self.inclusion <= 1:
            raise PrivauditorError(
                f"split.canaries.inclusion is a probability in (0, 1], not {self.inclusion!r}"
            )

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,) if isinstance(self.kind, str) else tuple(self.kind)

    @property
    def audits(self) -> bool:
        """Whether the canaries make a one-run audit: audit kinds among them, coins of probability ½."""
        return self.inclusion == 0.5 and any(k in AUDIT_KINDS for k in self.kinds)

    @property
    def space(self) -> int:
        """|R|: how many secrets the format has."""
        return 10**self.digits


@dataclass(frozen=True)
class Canary:
    """One canary: its record (prompt empty, the whole text the target, as the offline records' bodies),
    the text before its secret, the secret's digits, how many times it trains and whether it does."""

    example: Example
    before: str
    secret: str
    repeats: int
    included: bool
    kind: str = "account"
    base_nll: float | None = None  # an audit canary's mean target NLL under the un-adapted base


def spaced(secret: str) -> str:
    return " ".join(secret)


def make_canaries(settings: CanarySettings, seed: int, rest: Sequence[Example] = ()) -> tuple[Canary, ...]:
    """The canaries of a split with this seed, kind by kind, each kind from one generator seeded by the seed
    and the kind: ``account`` names from Faker and secrets uniform over the format's space; ``record``
    canaries are the first of ``rest`` (the shuffled pool past every split part); ``random`` and
    ``designed`` ones are placeholders that :func:`~privauditor.tasks.leakage.audit_canaries.complete`
    writes once the tokenizer is loaded. Inclusion is drawn with probability ``settings.inclusion``."""
    found: list[Canary] = []
    for kind in settings.kinds:
        rng = random.Random(f"canaries:{kind}:{seed}")
        if kind in KINDS:
            found += _accounts(settings, kind, rng, len(found))
            continue
        if kind == "record" and len(rest) < settings.count * len(settings.repeats):
            raise PrivauditorError(
                f"split.canaries: {settings.count * len(settings.repeats)} record canaries asked, but the "
                f"pool has {len(rest)} records past the split's parts"
            )
        for j, repeats in enumerate(r for r in settings.repeats for _ in range(settings.count)):
            record = rest[j] if kind == "record" else Example("", "", "")
            example = Example(f"canary-{kind}-{j:04d}", record.prompt, record.target)
            found.append(Canary(example, "", "", repeats, rng.random() < settings.inclusion, kind))
    return tuple(found)


def _accounts(settings: CanarySettings, kind: str, rng: random.Random, start: int) -> list[Canary]:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(rng.randrange(2**32))
    found = []
    for repeats in settings.repeats:
        for _ in range(settings.count):
            before = KINDS[kind].format(person=f"{fake.first_name()} {fake.last_name()}")
            secret = str(rng.randrange(settings.space)).zfill(settings.digits)
            included = rng.random() < settings.inclusion
            index = start + len(found)
            example = Example(f"canary-{index:03d}", "", f"{before} {spaced(secret)}")
            found.append(Canary(example, before, secret, repeats, included))
    return found


def secret_logprob(
    scorer: Any, canary: Canary, secrets: Sequence[str], max_length: int, batch_size: int
) -> np.ndarray:
    """log p (nats) of each candidate secret after the canary's text before it: the scored record is the
    canary's text with that secret, and its last tokens (those the secret adds) are summed. A format whose
    text before the secret tokenises differently once a secret follows is refused."""
    tokenizer = scorer.tokenizer
    before = tokenizer(canary.before, add_special_tokens=False)["input_ids"]
    texts = [f"{canary.before} {spaced(s)}" for s in secrets]
    if tokenizer(texts[:1], add_special_tokens=False)["input_ids"][0][: len(before)] != before:
        raise PrivauditorError(
            f"canary format {canary.before!r}: its text tokenises differently once a secret follows"
        )
    head = len(before)
    examples = [Example(f"{canary.example.sample_id}-{i}", "", t) for i, t in enumerate(texts)]
    stats = scorer.score(examples, max_length, batch_size, moments=False)
    return np.array([s.logp[head:].sum(dtype=np.float64) for s in stats])


def exposure(scorer: Any, canary: Canary, settings: CanarySettings, max_length: int, batch_size: int,
             seed: int) -> dict[str, Any]:  # fmt: skip
    """The canary's exposure (bits) under ``scorer``'s model, exact or estimated (module docstring)."""
    bits = math.log2(settings.space)
    if settings.space <= settings.exact_limit:
        secrets = [str(i).zfill(settings.digits) for i in range(settings.space)]
        logp = secret_logprob(scorer, canary, secrets, max_length, batch_size)
        rank = 1 + int(np.count_nonzero(logp > logp[int(canary.secret)]))
        return {"exposure": bits - math.log2(rank), "rank": rank, "method": "exact"}
    from scipy.stats import skewnorm

    rng = np.random.default_rng([seed, *canary.example.sample_id.encode()])  # its own draw per canary
    drawn = {canary.secret}
    others: list[str] = []
    while len(others) < settings.samples:
        candidate = str(int(rng.integers(settings.space))).zfill(settings.digits)
        if candidate not in drawn:
            drawn.add(candidate)
            others.append(candidate)
    logp = secret_logprob(scorer, canary, [canary.secret, *others], max_length, batch_size)
    perplexity = -logp / math.log(2)  # log-perplexity in bits, as the paper's
    shape, loc, scale = skewnorm.fit(perplexity[1:])
    below = float(skewnorm.cdf(perplexity[0], shape, loc, scale))
    value = bits if below <= 0 else min(bits, max(0.0, -math.log2(below)))
    return {"exposure": value, "rank": None, "method": "estimated"}


def exposures(scorer: Any, canaries: Sequence[Canary], settings: CanarySettings, max_length: int,
              batch_size: int, seed: int) -> dict[str, Any]:  # fmt: skip
    """``extraction.json``'s ``exposure``: each canary's exposure with its repeats and inclusion (never its
    text), and per number of repeats the mean exposure of the included canaries and of those left out."""
    per = [
        {"canary": c.example.sample_id, "repeats": c.repeats, "included": c.included}
        | exposure(scorer, c, settings, max_length, batch_size, seed)
        for c in canaries
    ]
    summary = {}
    for repeats in settings.repeats:
        for included in (True, False):
            values = [p["exposure"] for p in per if p["repeats"] == repeats and p["included"] is included]
            if values:
                key = f"{repeats}" if included else f"{repeats}_left_out"
                summary[key] = {"mean": float(np.mean(values)), "n": len(values)}
    return {"space": settings.space, "canaries": per, "mean_by_repeats": summary}


def null_sf(mean: float, n: int) -> float:
    """P(a mean of ``n`` unseen canaries' exposures >= ``mean``) under the null of :func:`null_quantile`:
    the one-sided p-value of a mean exposure."""
    from scipy.stats import gamma

    return float(gamma.sf(mean, n, scale=1.0 / (n * math.log(2))))


def null_quantile(q: float, n: int) -> float:
    """The ``q`` quantile of the mean exposure of ``n`` canaries a model never saw: each exposure is
    -log2 U for a uniform rank U (continuous in the limit of a large space), an exponential of mean
    1/ln 2 bits, so their mean is Gamma(n) with scale 1/(n ln 2)."""
    from scipy.stats import gamma

    return float(gamma.ppf(q, n, scale=1.0 / (n * math.log(2))))
