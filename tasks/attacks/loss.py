"""``loss``: the LOSS attack of Yeom et al. 2018, "Privacy Risk in Machine Learning: Analyzing the
Connection to Overfitting", https://arxiv.org/abs/1709.01604.

Members were trained on, so their loss is lower: score = − mean per-token NLL of the target tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("loss")
@dataclass
class LossAttack(Attack):
    """Negative mean token NLL under the adapted model."""

    name = "loss"
    paper = "https://arxiv.org/abs/1709.01604"

    def score(self, views) -> np.ndarray:
        return -views["signals"].nll
