"""``lowercase``: the target's mean NLL on each scored text with its target lowercased.

Carlini et al. 2021 compare a text's perplexity before and after lowercasing: a memorised text loses its
advantage when its casing changes, a generically likely one keeps it. The prompt stays as it is (it is the
instruction, not the record); only the target, the scored part, is lowercased. One forward pass per text.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import VIEWS
from ._base import Cost, View


@VIEWS.register("lowercase")
@dataclass(frozen=True)
class LowercaseView(View):
    """Per scored text, the target's mean NLL on the lowercased target."""

    name = "lowercase"
    version = 1

    def cost(self) -> Cost:
        return Cost(forward=1)

    def compute(self, context):
        import pyarrow as pa

        from ..datasets import Example

        target = context.scorer("target")
        examples = context.examples()
        lowered = [Example(e.sample_id, e.prompt, e.target.lower()) for e in examples]
        nll = target.mean_nll(lowered, context.max_length)
        return pa.table(
            {
                "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
                "lowercase_nll": pa.array(nll, pa.float64()),
            }
        )

    def read(self, table):
        import numpy as np

        return np.asarray(table.column("lowercase_nll").to_pylist(), dtype=np.float64)
