"""``neighbours``: the target model's mean NLL on ``k`` neighbour texts of every scored text.

Neighbours (Mattern et al. 2023, https://arxiv.org/abs/2305.18462) are near-copies of the scored target
text (as the target's tokenizer scored it) made by the offline tiny masked LM's substitutions of a
``mask_fraction`` of its tokens; they depend only on the texts, ``k``, ``mask_fraction``, the masked LM
and the seed, so they are generated once per split and shared by every cell
(:mod:`privauditor.tasks.passes.neighbours`). Each neighbour is then scored after the record's prompt, as the
text itself is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..infra.errors import PrivauditorError
from . import VIEWS, build_view
from ._base import Cost, View


@VIEWS.register("neighbours")
@dataclass(frozen=True)
class NeighboursView(View):
    """Per scored text, the target's mean NLL on each of ``k`` masked-LM neighbours."""

    k: int = 25  # neighbours per text
    mask_fraction: float = 0.1  # share of a text's tokens substituted in each neighbour

    name = "neighbours"
    version = 1

    def __post_init__(self) -> None:
        if self.k < 1:
            raise PrivauditorError(f"view 'neighbours': k must be a positive int, not {self.k!r}")
        if not 0 < self.mask_fraction < 1:
            raise PrivauditorError(
                f"view 'neighbours': mask_fraction must be in (0, 1), not {self.mask_fraction!r}"
            )

    def cost(self) -> Cost:
        return Cost(forward=self.k, shared_forward=self.k)  # the masked LM's passes are shared per split

    def identity(self, build: bool) -> dict[str, str | None]:
        from ..models import masked_lm_identity

        return {"masked_lm": masked_lm_identity(build)}

    def compute(self, context):
        import pyarrow as pa

        target = context.scorer("target")
        examples, variants = neighbour_examples(context, self.k, self.mask_fraction)
        nll = target.mean_nll(variants, context.max_length)
        rows = [nll[i * self.k : (i + 1) * self.k].tolist() for i in range(len(examples))]
        return pa.table(
            {
                "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
                "neighbour_nll": pa.array(rows, pa.list_(pa.float64())),
            }
        )

    def read(self, table):
        import numpy as np

        return [np.asarray(row, dtype=np.float64) for row in table.column("neighbour_nll").to_pylist()]


def neighbour_examples(context, k: int, mask_fraction: float):
    """The scored examples and their ``k`` neighbours each (``<sample id>#<j>``, after the record's prompt,
    in the scored order): made once per split and cached under ``shared/neighbours/``."""
    from ..datasets import Example
    from ..passes.neighbours import cached_neighbours

    signals = context.get(build_view("signals"))
    scored = context.scorer("target").tokenizer.batch_decode([t.tolist() for t in signals.token_ids])
    found = cached_neighbours(
        context.shared / "neighbours", signals.sample_id, scored, k, mask_fraction, context.seed
    )
    examples = context.examples()
    variants = [
        Example(f"{e.sample_id}#{j}", e.prompt, text)
        for e in examples
        for j, text in enumerate(found[e.sample_id])
    ]
    return examples, variants
