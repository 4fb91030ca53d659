"""``con_recall``: Con-ReCaLL (Wang et al. 2024, "Con-ReCall: Detecting Pre-training Data in LLMs via
Contrastive Decoding", https://arxiv.org/abs/2409.03363).

score = [LL(x | P_non) − γ · LL(x | P_mem)] / LL(x), with P_non a prefix of known non-members (the
split's ``population``) and P_mem one of known members (``known_members``: records trained on and never
scored), each of ``shots`` records, placed as the ``conditioned`` view says. A member's likelihood falls
under P_non and rises under P_mem; the contrast separates it further than ReCaLL's single prefix.
γ = 1 is the form of the Con-ReCall code; the paper also searches γ on data with known labels, which a
benchmark must not do on its scored samples. Needs ``split.population`` and ``split.known_members``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack
from .recall import ratio


@ATTACKS.register("con_recall")
@dataclass
class ConRecallAttack(Attack):
    """Contrast of non-member- and member-conditioned log-likelihoods over the unconditional one."""

    shots: int = 12  # records in each prefix
    gamma: float = 1.0  # weight of the member-conditioned term

    name = "con_recall"
    paper = "https://arxiv.org/abs/2409.03363"

    def views(self) -> dict:
        from ..views import build_view

        return {
            "signals": build_view("signals"),
            "non_members": build_view("conditioned", {"part": "population", "shots": self.shots}),
            "members": build_view("conditioned", {"part": "known_members", "shots": self.shots}),
        }

    def score(self, views) -> np.ndarray:
        contrast = np.asarray(views["non_members"]) - self.gamma * np.asarray(views["members"])
        return ratio(contrast, views["signals"].nll)
