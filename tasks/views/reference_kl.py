"""``reference_kl``: per scored text, at each target token, KL(p_reference || p_target) between the two
models' next-token distributions (InfoRMIA's token-level calibration reads it).

It needs both models' whole next-token distributions at the same positions, which no per-model store
holds, so it runs both models on every scored text (:func:`privauditor.tasks.passes.forward.reference_kl`: two
passes, neither shared, the logits projected a chunk at a time). The two must share the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import VIEWS
from ._base import Cost, View


@VIEWS.register("reference_kl")
@dataclass(frozen=True)
class ReferenceKlView(View):
    """Per target token, KL(p_reference || p_target) over the vocabulary."""

    name = "reference_kl"
    version = 1
    in_context = False  # the reference reads no demonstrations

    def models(self) -> tuple[str, ...]:
        return ("target", "reference")

    def cost(self) -> Cost:
        return Cost(forward=2)

    def compute(self, context):
        import pyarrow as pa

        from ..passes.forward import reference_kl

        target, reference = context.scorer("target"), context.scorer("reference")
        examples = context.examples()
        values = reference_kl(
            target.model, reference.model, target.tokenizer, examples, context.max_length, target.seq2seq,
            context.batch_size,
        )  # fmt: skip
        return pa.table(
            {
                "sample_id": pa.array([e.sample_id for e in examples], pa.string()),
                "kl": pa.array([v.tolist() for v in values], pa.list_(pa.float32())),
            }
        )

    def read(self, table):
        import numpy as np

        return [np.asarray(v, dtype=np.float32) for v in table.column("kl").to_pylist()]
