"""``signals``: per-token signals of one model on one split part, the input of most attacks.

Per scored text: ``token_ids``, ``logp`` (log p of each target token), ``mu`` / ``sigma`` (mean and
standard deviation of log p over the vocabulary under p) and ``zlib_bytes`` (the design's
``signals.parquet`` columns; :mod:`privauditor.tasks.passes.forward` computes them, one batched forward pass per
text). ``model`` picks the target (the model under attack) or the reference model (by default the
un-adapted base, whose signals every adaptation of a split shares); ``part`` picks the texts: the scored
members and non-members, or the ``population`` / ``known_members`` parts for attacks that compare with
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from . import VIEWS
from ._base import Cost, View


@VIEWS.register("signals")
@dataclass(frozen=True)
class SignalsView(View):
    """Per-token log-probabilities and vocabulary moments of one model on one split part."""

    model: Literal["target", "reference"] = "target"
    part: Literal["scored", "population", "known_members"] = "scored"

    name = "signals"
    version = 2  # 2: the store format 2 (top1_logp, rank, topk_lse)

    def models(self) -> tuple[str, ...]:
        return (self.model,)

    def parts(self) -> tuple[str, ...]:
        return (self.part,)

    def cost(self) -> Cost:
        return Cost(forward=1)

    def key_parameters(self) -> dict:
        return {"part": self.part}  # which model is keyed by its identity, not by its role

    def compute(self, context):
        scorer = context.scorer(self.model)
        examples = context.examples(self.part)
        signals = scorer.signals(examples, context.member(self.part), context.max_length, context.batch_size)
        return signals.to_table()

    def read(self, table):
        from ..passes.signal_table import Signals

        return Signals.from_table(table)
