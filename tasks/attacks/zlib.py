"""``zlib``: NLL over zlib entropy (Carlini et al. 2021, "Extracting Training Data from Large Language
Models", https://arxiv.org/abs/2012.07805).

score = − NLL / zlib_bytes, with NLL the mean per-token NLL (nats) of the target text and zlib_bytes the
length in **bytes** of its zlib-compressed UTF-8 (the design: the text as scored, after truncation).
Bytes, as Carlini et al.'s code and MIMIR compute it: bits would only multiply every score by 8, which
no threshold-free metric (AUC, TPR at FPR) can see. Texts that compress well are generically likely;
dividing by their entropy discounts that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("zlib")
@dataclass
class ZlibAttack(Attack):
    """Negative NLL divided by the zlib-compressed length in bytes."""

    name = "zlib"
    paper = "https://arxiv.org/abs/2012.07805"

    def score(self, views) -> np.ndarray:
        signals = views["signals"]
        return -signals.nll / np.maximum(signals.zlib_bytes, 1).astype(np.float64)
