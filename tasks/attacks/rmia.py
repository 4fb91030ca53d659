"""``rmia``: the robust membership inference attack (Zarifzadeh et al. 2024, "Low-Cost High-Power
Membership Inference Attacks", https://arxiv.org/abs/2312.03262), offline, with the base as reference.

For a text x, Pr(x | θ) is the adapted model's probability of it, taken per token: exp(−NLL(x)), the
geometric mean of its target tokens' probabilities (a whole text's product would sit near 0 for every
text). The offline paper form estimates the population's Pr(x) from one reference model that never
trained on x (here the un-adapted base, the ``reference`` role): Pr(x) = ½ [(1 + a) Pr(x | ref) + (1 − a)],
``a`` the offline scaling. With the same for each population sample z
(the split's ``population`` part: never trained on nor scored), the pairwise likelihood ratio is
LR(x, z) = [Pr(x | θ) / Pr(x)] / [Pr(z | θ) / Pr(z)], and score(x) = the share of z with LR(x, z) > γ
(``gamma`` = 1, the paper's). Scores lie on a grid of 1 / |population|: with the default sweep's 280
population samples a step is 0.0036, as fine as the AUC's own resolution at 280 members.

``a``: privacy-meter does not fix it; it tunes it (github.com/privacytrustlab/ml_privacy_meter at commit
e384af8, ``attacks.py`` lines 62-88, called from ``audit.py`` lines 178-186): over the grid 0, 0.1, ...,
1, the value whose RMIA scores have the highest AUC on a paired reference model used as a temporary
target, with that model's known membership (the first of equal AUCs). privauditor trains no paired
model; by default (``a: null``) it takes the grid's value of highest AUC on held-out labelled texts the
scored ones never touch, as ``con_recall`` picks its γ: the split's ``known_members`` (trained on, never
scored) against the ``population`` (each population text compared with the others, leaving itself
out), the first of equal AUCs as privacy-meter's loop keeps it; the ``a`` chosen is stored with the
metrics. This needs ``split.known_members``, and it is a stronger access than privacy-meter's: ``a`` is
chosen on labelled members of the target itself (records it trained on), not on a paired reference model,
so the attack's access is ``known-members`` (:data:`~privauditor.tasks.attacks._base.ACCESS`; it reads the
reference model too), not ``reference``. A number for ``a`` fixes it and reads no known members (the
access then is ``reference``'s, though rows still name the default's). Why it matters: where
Pr(x | ref) is small (the tiny bases' median is about 0.001) the prior is nearly the constant
(1 − a)/2 for any a ≤ 0.9, the reference drops out and the attack ranks texts as ``loss`` does
(ρ ≥ 0.9997 over the 68 cells of the default at a = 0.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("rmia")
@dataclass
class RmiaAttack(Attack):
    """Share of population samples the text beats in the pairwise likelihood-ratio test."""

    a: float | None = None  # offline scaling of the reference probability; None: chosen on held-out texts
    gamma: float = 1.0  # threshold on the pairwise likelihood ratio

    name = "rmia"
    paper = "https://arxiv.org/abs/2312.03262"
    access = "known-members"  # a is chosen on the target's own known members (see the module doc)
    version = 2  # 2: a chosen on held-out labelled texts by default (was 0.3)

    def __post_init__(self) -> None:
        if self.a is not None and not (isinstance(self.a, int | float) and 0 <= self.a <= 1):
            raise PrivauditorError(f"attack 'rmia': a must lie in [0, 1] or be null, not {self.a!r}")
        if not self.gamma > 0:
            raise PrivauditorError(f"attack 'rmia': gamma must be positive, not {self.gamma!r}")
        self._chosen = self.a

    def views(self) -> dict:
        from ..views import build_view

        def signals(model, part):
            return build_view("signals", {"model": model, "part": part})

        views = {
            "signals": signals("target", "scored"),
            "reference": signals("reference", "scored"),
            "population": signals("target", "population"),
            "population_reference": signals("reference", "population"),
        }
        if self.a is None:
            views |= {
                "held_out_members": signals("target", "known_members"),
                "held_out_members_reference": signals("reference", "known_members"),
            }
        return views

    def score(self, views) -> np.ndarray:
        population = (views["population"].nll, views["population_reference"].nll)
        if self.a is None:
            members = (views["held_out_members"].nll, views["held_out_members_reference"].nll)
            self._chosen = self.choose_a(members, population)
        z = ratio(*population, self._chosen)
        x = ratio(views["signals"].nll, views["reference"].nll, self._chosen)
        return (x[:, None] / z[None, :] > self.gamma).mean(axis=1)

    def choose_a(self, members: tuple, population: tuple) -> float:
        """The grid's ``a`` of highest AUC of held-out ``members`` against the ``population`` (each
        population text scored against the others), the first of equal AUCs."""
        from ..stats.metrics import auc_from_ranks

        labels = np.r_[np.ones(len(members[0]), bool), np.zeros(len(population[0]), bool)]
        best, best_auc = GRID[0], -1.0
        for a in GRID:
            z = ratio(*population, a)
            held = (ratio(*members, a)[:, None] / z[None, :] > self.gamma).mean(axis=1)
            beats = (z[:, None] / z[None, :] > self.gamma).sum(axis=1) - (self.gamma < 1)  # not itself
            auc = float(auc_from_ranks(labels, np.r_[held, beats / max(1, len(z) - 1)]))
            if auc > best_auc:
                best, best_auc = a, auc
        return best

    def fitted(self) -> dict:
        return {"a": self._chosen} if self.a is None else {}


#: the values of a privacy-meter's tuning tries (np.arange(0, 1.1, 0.1))
GRID = tuple(round(0.1 * i, 1) for i in range(11))


def ratio(nll, reference_nll, a: float) -> np.ndarray:
    """Pr(x | θ) / Pr(x) per text from the target's and the reference's mean NLLs, at offline scaling ``a``."""
    prior = 0.5 * ((1 + a) * np.exp(-np.asarray(reference_nll, dtype=np.float64)) + (1 - a))
    return np.exp(-np.asarray(nll, dtype=np.float64)) / prior
