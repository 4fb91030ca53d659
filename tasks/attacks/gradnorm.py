"""``gradnorm``: the white-box gradient-norm attack (Nasr et al. 2019, "Comprehensive Privacy Analysis
of Deep Learning", https://arxiv.org/abs/1812.00910, which found the gradient norm separates members).

Per sample, the gradient of its mean target NLL with respect to the parameters the adaptation trains
(all parameters for ``none`` and ``full``) is taken as one flat vector; score = − its L2 norm (the
``norm`` field; p-norms are allowed). Training drives member gradients toward zero, so small is member.
Computed by the cell (one backward pass per text) and stored as the ``grad_norm`` signal column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("gradnorm")
@dataclass
class GradNormAttack(Attack):
    """Negative norm of the per-sample loss gradient."""

    norm: float = 2.0  # the p of the p-norm over the flattened gradient

    name = "gradnorm"
    paper = "https://arxiv.org/abs/1812.00910"
    needs = ("gradients",)

    def __post_init__(self) -> None:
        if not isinstance(self.norm, int | float) or self.norm <= 0:
            raise PrivauditorError(f"attack 'gradnorm': norm must be a positive number, not {self.norm!r}")

    def score(self, signals, reference=None) -> np.ndarray:
        if signals.grad_norm is None:
            raise ValueError("the gradnorm attack needs per-sample gradient norms (signals.grad_norm)")
        return -np.asarray(signals.grad_norm, dtype=np.float64)
