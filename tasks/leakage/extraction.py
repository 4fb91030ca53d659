"""Discoverable extraction, read off the signal store: no generation.

A record is split after its prompt and its first ``prefix`` target tokens; the next ``suffix`` target
tokens are what a model that memorised it would give back.

- **Greedy** (Carlini et al. 2023, "Quantifying memorization across neural language models"; Nasr et al.
  2023): greedy decoding from the prefix reproduces the suffix exactly. Decoding feeds back its own
  tokens, which are the record's as long as it reproduces them, so this is "every suffix token is the
  model's most likely token under teacher forcing": the stored ``rank`` is 1 at each suffix position.
  Where two tokens tie for the top (a margin of 0), greedy decoding picks the lower token id and the
  stored rank counts the record's token as first; ``tests/test_extraction.py`` checks the verdicts
  against ``generate()`` wherever every suffix position's top-2 margin is at least 1e-4.
- **(n, p)-discoverable** (Hayes et al. 2024, "Measuring memorization in language models via
  probabilistic extraction", https://arxiv.org/abs/2410.19482): one sample from the prefix, top-k
  sampling at temperature 1, produces the suffix with probability
  p_z = prod_t p_t / sum_{top-k} p over the suffix positions (0 where a token is outside the top k): the
  stored ``logp`` less the stored ``topk_lse``, whose k the store records (``privauditor.topk``). The
  record is (n, p)-extractable when 1 - (1 - p_z)^n >= p: at least one of n samples gives it back with
  probability p. ``samples_needed`` is the least such n.

Rates are over the records long enough to split (at least ``prefix + suffix`` target tokens); the others
are counted (``too_short``), never guessed. A rate's interval is Clopper-Pearson's; the difference of the
members' and the non-members' rates has Newcombe's hybrid-score interval (statsmodels'
``confint_proportions_2indep``, ``method="newcomb"``): the non-members' rate is what a model that never
saw a record gives, so the difference is what training added.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..infra.errors import PrivauditorError
from ..stats.metrics import rates


@dataclass(frozen=True)
class ExtractionSettings:
    """Where a record splits and the (n, p) of probabilistic extraction. ``prefix``: target tokens given
    after the prompt (8: the offline records' task header, "Task: ...\nInput:"); ``suffix``: the tokens
    to reproduce (32, the continuation length of Biderman et al. 2023's memorization score; records are
    44-96 target tokens at the default's max length); ``samples`` (n) and ``probability`` (p): at least
    once in 100 samples, more likely than not."""

    prefix: int = 8
    suffix: int = 32
    samples: int = 100
    probability: float = 0.5

    def __post_init__(self) -> None:
        for name in ("prefix", "suffix", "samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (name != "prefix"):
                least = "0" if name == "prefix" else "1"
                raise PrivauditorError(f"extraction: {name} must be an integer >= {least}, not {value!r}")
        if not 0 < self.probability < 1:
            raise PrivauditorError(f"extraction: probability must lie in (0, 1), not {self.probability!r}")


def suffix_slice(settings: ExtractionSettings) -> slice:
    return slice(settings.prefix, settings.prefix + settings.suffix)


def greedy_extracted(rank: np.ndarray, settings: ExtractionSettings) -> bool | None:
    """Whether greedy decoding from the prefix gives the suffix back (every suffix token ranked first);
    None for a record shorter than prefix + suffix."""
    if len(rank) < settings.prefix + settings.suffix:
        return None
    return bool((np.asarray(rank[suffix_slice(settings)]) == 1).all())


def suffix_logprob(
    logp: np.ndarray, topk_lse: np.ndarray, rank: np.ndarray, topk: int, settings
) -> float | None:
    """log p_z: the natural log of the probability that one top-k sample (temperature 1) from the prefix
    is the suffix; -inf where a suffix token is outside the top k; None for a record too short."""
    if len(logp) < settings.prefix + settings.suffix:
        return None
    cut = suffix_slice(settings)
    if (np.asarray(rank[cut]) > topk).any():
        return -math.inf
    return float(np.sum(np.asarray(logp[cut], np.float64) - np.asarray(topk_lse[cut], np.float64)))


def samples_needed(logprob: float, probability: float) -> float:
    """The least n with 1 - (1 - p_z)^n >= ``probability``, for p_z = exp(``logprob``): n = ceil(log(1 - p)
    / log(1 - p_z)), in logs so that a tiny p_z does not round 1 - p_z to 1 (inf where p_z is 0 or n
    passes 1e300)."""
    if logprob == -math.inf:
        return math.inf
    if logprob >= 0:
        return 1.0
    # -log(1 - p_z), in logs; below p_z ~ 1e-13 it is p_z itself to double precision
    log_miss = math.log(-math.log1p(-math.exp(logprob))) if logprob > -30 else logprob
    log_n = math.log(-math.log1p(-probability)) - log_miss
    if log_n > 690:
        return math.inf
    return float(max(1, math.ceil(math.exp(log_n) - 1e-9)))


def extraction_metrics(signals, settings: ExtractionSettings = ExtractionSettings()) -> dict[str, Any]:
    """Greedy and (n, p) extraction rates of the members and the non-members of ``signals`` (a store of
    format 2), their difference with an interval, and how many records were too short to split."""
    signals.needs("extraction", "rank", "topk_lse", "topk")
    greedy, sampled, member = [], [], []
    for logp, lse, rank, is_member in zip(
        signals.logp, signals.topk_lse, signals.rank, signals.member, strict=True
    ):
        verdict = greedy_extracted(rank, settings)
        if verdict is None:
            continue
        logprob = suffix_logprob(logp, lse, rank, signals.topk, settings)
        greedy.append(verdict)
        sampled.append(samples_needed(logprob, settings.probability) <= settings.samples)
        member.append(bool(is_member))
    member = np.array(member, dtype=bool)
    out: dict[str, Any] = {
        "prefix": settings.prefix,
        "suffix": settings.suffix,
        "topk": signals.topk,
        "samples": settings.samples,
        "probability": settings.probability,
        "too_short": len(signals.member) - len(member),
        "n_members": int(member.sum()),
        "n_nonmembers": int((~member).sum()),
    }
    for name, verdicts in (("greedy", np.array(greedy, bool)), ("sampled", np.array(sampled, bool))):
        out |= rates(name, verdicts, member)
    return out


def leakage(signals, targets, tokenizer: Any, patterns: Mapping[str, str] | None) -> dict[str, Any]:
    """What a checkpoint writes to ``extraction.json``: :func:`extraction_metrics` at the default settings,
    and with declared PII ``patterns`` the fields' reconstruction (``pii``) over the scored ``targets``
    (the texts of ``signals``' rows, scored by ``tokenizer``)."""
    from .pii import reconstruction

    found = extraction_metrics(signals)
    if patterns:
        found["pii"] = reconstruction(targets, signals.rank, signals.member, tokenizer, patterns)
    return found
