"""A model ready to score (:class:`Scorer`), the reference model loaded on demand (:class:`Reference`)
and the identity a view of either is stored under (:func:`identity_of`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..datasets import Example
from .signal_table import Signals

if TYPE_CHECKING:
    from .signal_table import TokenStats


@dataclass(frozen=True)
class ModelIdentity:
    """What a model's outputs depend on besides the texts: a view key's model part."""

    name: str
    weights: str | None  # the base's weights identity (sha256 of the bytes, or a hub revision)
    adaptation: str  # content hash of the adaptation; "none" for an un-adapted model
    tokenizer: str
    dtype: str


@dataclass
class Scorer:
    """A model ready to score, and its identity. ``contexts`` (in-context learning) maps each sample id
    to the text the model reads in front of that sample's prompt: its demonstrations."""

    model: Any
    tokenizer: Any
    seq2seq: bool
    identity: ModelIdentity
    contexts: Mapping[str, str] | None = None

    def context_of(self, sample_id: str) -> str:
        """The context ``sample_id`` is read in ("" without in-context learning); a variant of a sample
        (``<id>#<j>``, e.g. a neighbour text) is read in its sample's."""
        if not self.contexts:
            return ""
        found = self.contexts.get(sample_id)
        return self.contexts[sample_id.rsplit("#", 1)[0]] if found is None else found

    @property
    def context_tokens(self) -> int:
        """Positions the longest context takes (0 without in-context learning)."""
        return context_tokens(self.contexts, self.tokenizer)

    def score(
        self,
        examples: Sequence[Example],
        max_length: int,
        batch_size: int = 16,
        moments: bool = True,
        prefixes: Sequence[str] | None = None,
    ) -> list[TokenStats]:
        """Per-token statistics of every example's target, each read in its context, after its
        ``prefixes`` entry when given (the scored positions stay the example's own)."""
        from .forward import score_examples, score_in_context

        if not self.contexts and prefixes is None:
            return score_examples(
                self.model, self.tokenizer, examples, max_length, self.seq2seq, batch_size, moments
            )
        prefixes = prefixes or [""] * len(examples)
        before = [self.context_of(e.sample_id) + p for e, p in zip(examples, prefixes, strict=True)]
        return score_in_context(
            self.model, self.tokenizer, examples, before, max_length, self.seq2seq, batch_size, moments
        )

    def mean_nll(self, examples: Sequence[Example], max_length: int, batch_size: int = 32) -> np.ndarray:
        """Mean per-token NLL of every example's target, read in its context: float64 array."""
        stats = self.score(examples, max_length, batch_size, moments=False)
        return np.array([s.nll for s in stats], dtype=np.float64)

    def signals(
        self, examples: Sequence[Example], member: np.ndarray, max_length: int, batch_size: int
    ) -> Signals:
        stats = self.score(examples, max_length, batch_size)
        texts = self.tokenizer.batch_decode([s.token_ids.tolist() for s in stats])  # the target as scored
        return Signals.from_stats([e.sample_id for e in examples], member, stats, texts)


def context_tokens(contexts: Mapping[str, str] | None, tokenizer: Any) -> int:
    """Tokens of the longest in-context prompt (0 without in-context learning)."""
    if not contexts:
        return 0
    texts = sorted(set(contexts.values()))
    return max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])


@dataclass
class Reference:
    """The reference model: its identity is known up front, the model is loaded only when a view that
    reads it is not stored yet."""

    identity: ModelIdentity
    load: Callable[[], Scorer]


def identity_of(
    model: Any,
    tokenizer: Any,
    name: str,
    weights: str | None,
    adaptation_hash: str,
    precision: str | None = None,
) -> ModelIdentity:
    """What a view of ``model`` is stored under. Its numeric form is the ``precision`` it is scored at
    (default: the one the model was given, tasks/infra/precision.py): ``torch.float32`` for ``fp32`` (as ids
    always said), the recipe's name for a mixed one, whose first parameter's dtype depends on what trains;
    a model never given one, by its first parameter's dtype."""
    from ..infra.precision import ATTRIBUTE

    given = precision or getattr(model, ATTRIBUTE, None)
    dtype = str(next(model.parameters()).dtype) if given is None else given
    dtype = "torch.float32" if dtype == "fp32" else dtype
    return ModelIdentity(name, weights, adaptation_hash, f"{tokenizer.name_or_path}:{len(tokenizer)}", dtype)
