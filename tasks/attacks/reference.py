"""``reference``: the reference-model likelihood ratio (Carlini et al. 2021, "Extracting Training Data
from Large Language Models", https://arxiv.org/abs/2012.07805; Mireshghallah et al. 2022,
https://arxiv.org/abs/2203.03929).

score = NLL_reference − NLL_target (mean per-token NLL of each model on the same target text): a text
the adaptation made much more likely than the reference does is a member. The reference defaults to
the un-adapted base, whose signals are computed once per (base, split) and shared by every adaptation;
each model's NLL is its own per-token mean, so a reference with another tokenizer also works.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("reference")
@dataclass
class ReferenceAttack(Attack):
    """Reference NLL minus target NLL."""

    name = "reference"
    paper = "https://arxiv.org/abs/2012.07805"
    access = "reference"

    def views(self) -> dict:
        from ..views import build_view

        return {"signals": build_view("signals"), "reference": build_view("signals", {"model": "reference"})}

    def score(self, views) -> np.ndarray:
        return views["reference"].nll - views["signals"].nll
