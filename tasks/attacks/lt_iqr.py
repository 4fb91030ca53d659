"""``lt_iqr``: the spread of a text's loss along the training trajectory, LT-IQR (Pollock, Shilov, Dodd &
de Montjoye 2024, "Free Record-Level Privacy Risk Evaluation Through Artifact-Based Methods",
https://arxiv.org/abs/2411.05743), applied as a label-free membership score over the stored checkpoints.

Per text, the trace of its mean NLL under the target at each checkpoint up to the one attacked (the
``trajectory`` view: the initial state first where the schedule has it); score = the interquartile
range of the trace, its 75th minus its 25th percentile with linear interpolation. A member's loss falls
far over training, a non-member's little, so a wide trace marks a member. The rule is the authors'
code's: github.com/computationalprivacy/loss_traces at commit 9ab460a,
``src/loss_traces/results/result_processing.py`` lines 131-135 (``_reduction_iqr``: pandas' quantiles
0.75 and 0.25 per sample, whose default interpolation is linear, as numpy's here). Deviations: the
authors record each training step's loss of the sample and use the score to rank training samples by
their risk under LiRA; here the trace is the stored checkpoints' NLL of members and non-members alike,
and the score ranks them for membership. Access: the checkpoints of the trajectory (a new threat model:
an attacker who holds the training run's snapshots). No pass of its own: every checkpoint's signals are
stored. It runs from the second checkpoint on, as the first has no trajectory; with two points, the
trace's IQR is half its one difference, the magnitude of ``reference``'s where the first is the base.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("lt_iqr")
@dataclass
class LossTraceIqrAttack(Attack):
    """Interquartile range of the text's NLL over the checkpoints so far."""

    name = "lt_iqr"
    paper = "https://arxiv.org/abs/2411.05743"
    access = "checkpoints"

    def views(self) -> dict:
        from ..views import build_view

        return {"trajectory": build_view("trajectory")}

    def runs_at(self, step: int, last: int, best: int) -> bool:
        """From the second checkpoint (index 1) on: the first has no trajectory."""
        return step >= 1 and super().runs_at(step, last, best)

    def score(self, views) -> np.ndarray:
        traces = np.asarray(views["trajectory"], dtype=np.float64)
        if traces.ndim != 2 or traces.shape[1] < 2:
            raise PrivauditorError("attack 'lt_iqr' needs at least 2 checkpoints of a training trajectory")
        high, low = np.quantile(traces, [0.75, 0.25], axis=1)
        return high - low
