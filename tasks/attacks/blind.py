"""``blind``: the model-free control (Das et al. 2024, "Blind Baselines Beat Membership Inference Attacks
for Foundation Models", https://arxiv.org/abs/2406.16201).

score = the out-of-fold member probability of a bag-of-n-grams classifier trained on the split's own
member and non-member labels (the ``blind`` view), never querying the model. On an i.i.d. split it sits
near chance (pooled out-of-fold AUCs fall a little below 0.5); an attack that does no better than it on
a split learns nothing about training there. The view also tests the split for a shift (a label
permutation test); ``privauditor report`` shows both next to the results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("blind")
@dataclass
class BlindAttack(Attack):
    """Out-of-fold probability of a model-free bag-of-n-grams classifier."""

    folds: int = 5  # cross-validation folds
    permutations: int = 200  # label permutations of the view's shift test
    c: float = 1.0  # inverse L2 strength of the logistic regression

    name = "blind"
    paper = "https://arxiv.org/abs/2406.16201"
    access = "model-free"

    def views(self) -> dict:
        from ..views import build_view

        params = {"folds": self.folds, "permutations": self.permutations, "c": self.c}
        return {"blind": build_view("blind", params)}

    def score(self, views) -> np.ndarray:
        return views["blind"]
