"""``recall``: ReCaLL (Xie et al. 2024, "ReCaLL: Membership Inference via Relative Conditional
Log-Likelihoods", https://arxiv.org/abs/2406.15968).

score = LL(x | P) / LL(x): the mean per-token log-likelihood of the target text with a prefix P of known
non-members in front (the ``conditioned`` view over the split's ``population`` part: where P goes, and
that the scored tokens stay the target's, is said there), over the unconditioned one. Both are negative;
a member's likelihood falls more under a non-member prefix, so its ratio is larger. ``shots`` is P's
number of records, 12 as in the ReCaLL code (fewer when the context cannot hold them). Needs
``split.population`` of at least ``shots``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import PrivauditorError
from . import ATTACKS
from ._base import Attack


@ATTACKS.register("recall")
@dataclass
class RecallAttack(Attack):
    """Conditional over unconditional log-likelihood, the condition a prefix of known non-members."""

    shots: int = 12  # records of known non-members in the prefix

    name = "recall"
    paper = "https://arxiv.org/abs/2406.15968"

    def views(self) -> dict:
        from ..views import build_view

        prefix = build_view("conditioned", {"part": "population", "shots": self.shots})
        return {"signals": build_view("signals"), "non_members": prefix}

    def score(self, views) -> np.ndarray:
        return ratio(views["non_members"], views["signals"].nll)


def ratio(conditioned_nll, nll) -> np.ndarray:
    """LL(x | P) / LL(x) from the two mean NLLs (the signs cancel)."""
    nll = np.asarray(nll, dtype=np.float64)
    if (nll <= 0).any():
        raise PrivauditorError("ReCaLL needs a positive NLL on every text (a text of probability 1 has none)")
    return np.asarray(conditioned_nll, dtype=np.float64) / nll
