"""``grad_norm``: per scored text, the norm of the gradient of its loss w.r.t. the trained parameters.

The gradient of each text's mean target NLL with respect to the parameters the adaptation trains (all
parameters for ``none`` and ``full``), as one flat vector, reduced to its ``norm``-norm. Per-sample
gradients come batched from :mod:`privauditor.tasks.passes.gradients` (one forward and one backward pass per
batch), in eval mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..infra.errors import PrivauditorError
from . import VIEWS
from ._base import Cost, View


@VIEWS.register("grad_norm")
@dataclass(frozen=True)
class GradNormView(View):
    """The p-norm of each scored text's loss gradient w.r.t. the trained parameters."""

    norm: float = 2.0  # the p of the p-norm over the flattened gradient

    name = "grad_norm"
    in_context = False  # the gradient pass reads no context
    version = 1

    def __post_init__(self) -> None:
        if self.norm <= 0:
            raise PrivauditorError(f"view 'grad_norm': norm must be a positive number, not {self.norm!r}")

    def cost(self) -> Cost:
        return Cost(forward=1, backward=1)

    def compute(self, context):
        import pyarrow as pa

        from ..passes.gradients import gradient_norms

        target = context.scorer("target")
        examples = context.examples()
        norms = gradient_norms(
            target.model, target.tokenizer, examples, context.max_length, target.seq2seq, self.norm,
            context.batch_size,
        )  # fmt: skip
        return pa.table(
            {
                "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
                "grad_norm": pa.array(norms, pa.float64()),
            }
        )

    def read(self, table):
        import numpy as np

        return np.asarray(table.column("grad_norm").to_pylist(), dtype=np.float64)
