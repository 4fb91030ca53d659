"""``rmia``: the robust membership inference attack (Zarifzadeh et al. 2024, "Low-Cost High-Power
Membership Inference Attacks", https://arxiv.org/abs/2312.03262), offline, with the base as reference.

For a text x, Pr(x | θ) is the adapted model's probability of it, taken per token: exp(−NLL(x)), the
geometric mean of its target tokens' probabilities (a whole text's product would sit near 0 for every
text). The offline paper form estimates the population's Pr(x) from one reference model that never
trained on x (here the un-adapted base, the ``reference`` role): Pr(x) = ½ [(1 + a) Pr(x | ref) + (1 − a)],
``a`` the offline scaling (0.3, privacy-meter's default). With the same for each population sample z
(the split's ``population`` part: never trained on nor scored), the pairwise likelihood ratio is
LR(x, z) = [Pr(x | θ) / Pr(x)] / [Pr(z | θ) / Pr(z)], and score(x) = the share of z with LR(x, z) > γ
(``gamma`` = 1, the paper's). Scores lie on a grid of 1 / |population|: with the default sweep's 280
population samples a step is 0.0036, as fine as the AUC's own resolution at 280 members.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("rmia")
@dataclass
class RmiaAttack(Attack):
    """Share of population samples the text beats in the pairwise likelihood-ratio test."""

    a: float = 0.3  # offline scaling of the reference probability
    gamma: float = 1.0  # threshold on the pairwise likelihood ratio

    name = "rmia"
    paper = "https://arxiv.org/abs/2312.03262"
    access = "reference"

    def __post_init__(self) -> None:
        if not 0 <= self.a <= 1:
            raise PrivauditorError(f"attack 'rmia': a must lie in [0, 1], not {self.a!r}")
        if not self.gamma > 0:
            raise PrivauditorError(f"attack 'rmia': gamma must be positive, not {self.gamma!r}")

    def views(self) -> dict:
        from ..views import build_view

        def signals(model, part):
            return build_view("signals", {"model": model, "part": part})

        return {
            "signals": signals("target", "scored"),
            "reference": signals("reference", "scored"),
            "population": signals("target", "population"),
            "population_reference": signals("reference", "population"),
        }

    def score(self, views) -> np.ndarray:
        x = self.ratio(views["signals"].nll, views["reference"].nll)
        z = self.ratio(views["population"].nll, views["population_reference"].nll)
        return (x[:, None] / z[None, :] > self.gamma).mean(axis=1)

    def ratio(self, nll, reference_nll) -> np.ndarray:
        """Pr(x | θ) / Pr(x) per text from the target's and the reference's mean NLLs."""
        prior = 0.5 * ((1 + self.a) * np.exp(-np.asarray(reference_nll, dtype=np.float64)) + (1 - self.a))
        return np.exp(-np.asarray(nll, dtype=np.float64)) / prior
