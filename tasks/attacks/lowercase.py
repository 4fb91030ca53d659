"""``lowercase``: the lowercase perplexity ratio (Carlini et al. 2021, "Extracting Training Data from Large
Language Models", https://arxiv.org/abs/2012.07805).

score = − NLL(x) / NLL(lowercase(x)), both mean per-token NLLs (nats) of the target text under the adapted
model, the second with the target lowercased (the ``lowercase`` view; the prompt is kept). The paper
ranks texts by the ratio of the two perplexities' logarithms, LL(x) / LL(lowercase(x)); the sign makes a
member (likely as written, much less likely lowercased) score higher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("lowercase")
@dataclass
class LowercaseAttack(Attack):
    """NLL of the text over NLL of its lowercased form, negated."""

    name = "lowercase"
    paper = "https://arxiv.org/abs/2012.07805"

    def views(self) -> dict:
        from ..views import build_view

        return {"signals": build_view("signals"), "lowercase": build_view("lowercase")}

    def score(self, views) -> np.ndarray:
        lowered = np.maximum(np.asarray(views["lowercase"], dtype=np.float64), 1e-12)
        return -views["signals"].nll / lowered
