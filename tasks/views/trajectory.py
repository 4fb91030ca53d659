"""``trajectory``: per scored text, the target's mean NLL at every checkpoint of its training trajectory
so far, oldest first, the current one last.

The earlier checkpoints' signals are already stored (each checkpoint of a cell keeps its
``signals.parquet``), so the view costs no pass: it reads them and the current checkpoint's signals
(``ViewContext.earlier``). Its key holds the earlier checkpoints' steps and adaptation hashes. Without an
earlier checkpoint (an audit, a cell of one checkpoint) there is no trajectory to read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..infra.errors import PrivauditorError
from . import VIEWS
from ._base import Cost, View, aligned


@VIEWS.register("trajectory")
@dataclass(frozen=True)
class TrajectoryView(View):
    """Each scored text's mean NLL under the target at each checkpoint up to the current one."""

    name = "trajectory"
    version = 1
    reads_earlier = True

    def cost(self) -> Cost:
        return Cost()  # the checkpoints' signals are stored already

    def compute(self, context):
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from . import build_view

        if not context.earlier:
            raise PrivauditorError("view 'trajectory' needs at least 2 checkpoints of a training trajectory")
        ids = [e.sample_id for e in context.examples()]
        current = context.get(build_view("signals")).nll
        traces = []
        for checkpoint in context.earlier:
            logp = aligned(
                pq.ParquetFile(checkpoint.signals).read(columns=["sample_id", "logp"]), ids
            ).column("logp")
            traces.append([-np.mean(lp, dtype=np.float64) for lp in logp.to_pylist()])
        matrix = np.column_stack([*traces, current])
        return pa.table(
            {
                "sample_id": pa.array(ids, pa.string()),
                "nll": pa.array(matrix.tolist(), pa.list_(pa.float64())),
            }
        )

    def read(self, table):
        import numpy as np

        return np.asarray(table.column("nll").to_pylist(), dtype=np.float64)
