"""``con_recall``: Con-ReCaLL (Wang et al. 2024, "Con-ReCall: Detecting Pre-training Data in LLMs via
Contrastive Decoding", https://arxiv.org/abs/2409.03363).

score = [LL(x | P_non) − γ · LL(x | P_mem)] / LL(x), with P_non a prefix of known non-members (the
split's ``population``) and P_mem one of known members (``known_members``: records trained on and never
scored), each of ``shots`` records, placed as the ``conditioned`` view says. A member's likelihood falls
under P_non and rises under P_mem; the contrast separates it further than ReCaLL's single prefix.

γ: the Con-ReCall code reports every γ of the grid (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0) and the
paper picks the best with known labels. A benchmark may not pick on its scored samples, so by default
(``gamma: null``) γ is the grid's value of highest AUC on held-out labelled texts, the records of
``known_members`` and ``population`` that neither prefix holds (ties go to the larger γ, 1 being the
form of the code's MIMIR port); the γ chosen is stored with the attack's metrics. That needs both parts
larger than ``shots``. A number for ``gamma`` fixes it and needs no held-out texts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack
from .recall import ratio

#: the γ values the Con-ReCall code scores
GRID = (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@ATTACKS.register("con_recall")
@dataclass
class ConRecallAttack(Attack):
    """Contrast of non-member- and member-conditioned log-likelihoods over the unconditional one."""

    shots: int = 12  # records in each prefix
    gamma: float | None = None  # weight of the member-conditioned term; None: chosen on held-out texts

    name = "con_recall"
    paper = "https://arxiv.org/abs/2409.03363"
    access = "known-members"  # P_mem is a prefix of labelled members (and γ is chosen on more of them)
    version = 2

    def __post_init__(self) -> None:
        if self.gamma is not None and not (isinstance(self.gamma, int | float) and self.gamma >= 0):
            raise PrivauditorError(
                f"attack 'con_recall': gamma must be a number >= 0 or null, not {self.gamma!r}"
            )
        super().__post_init__()
        self._chosen = self.gamma

    def views(self) -> dict:
        from ..views import build_view

        def conditioned(part, rows="scored"):
            return build_view("conditioned", {"part": part, "shots": self.shots, "rows": rows})

        views = {
            "signals": build_view("signals"),
            "non_members": conditioned("population"),
            "members": conditioned("known_members"),
        }
        if self.gamma is None:
            views |= {
                "held_out_non_members": conditioned("population", "held_out"),
                "held_out_members": conditioned("known_members", "held_out"),
            }
        return views

    def score(self, views) -> np.ndarray:
        if self.gamma is None:
            self._chosen = choose_gamma(views["held_out_non_members"], views["held_out_members"])
        contrast = np.asarray(views["non_members"]) - self._chosen * np.asarray(views["members"])
        return ratio(contrast, views["signals"].nll)

    def fitted(self) -> dict:
        return {"gamma": self._chosen} if self.gamma is None else {}


def choose_gamma(non_members, members) -> float:
    """The grid's γ of highest AUC on the held-out texts (the larger on a tie)."""
    from ..stats.metrics import auc_from_ranks

    if non_members.member.all() or not non_members.member.any():
        raise PrivauditorError("attack 'con_recall': its held-out texts need members and non-members both")

    def auc(gamma: float) -> float:
        contrast = non_members.conditioned_nll - gamma * members.conditioned_nll
        return float(auc_from_ranks(members.member, ratio(contrast, non_members.nll)))

    aucs = [auc(gamma) for gamma in GRID]
    return GRID[max(range(len(GRID)), key=lambda i: (aucs[i], i))]
