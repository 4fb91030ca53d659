"""``gradnorm``: the white-box gradient-norm attack (Nasr et al. 2019, "Comprehensive Privacy Analysis
of Deep Learning", https://arxiv.org/abs/1812.00910, which found the gradient norm separates members).

Per sample, the gradient of its mean target NLL with respect to the parameters the adaptation trains
(all parameters for ``none`` and ``full``) is taken as one flat vector; score = − its L2 norm (the
``norm`` field; p-norms are allowed). Training drives member gradients toward zero, so small is member.
The norms are the ``grad_norm`` view (batched per-sample gradients, one backward pass per batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("gradnorm")
@dataclass
class GradNormAttack(Attack):
    """Negative norm of the per-sample loss gradient."""

    norm: float = 2.0  # the p of the p-norm over the flattened gradient

    name = "gradnorm"
    paper = "https://arxiv.org/abs/1812.00910"
    access = "white-box"

    def views(self) -> dict:
        from ..views import build_view

        return {"gradients": build_view("grad_norm", {"norm": self.norm})}

    def score(self, views) -> np.ndarray:
        return -np.asarray(views["gradients"], dtype=np.float64)
