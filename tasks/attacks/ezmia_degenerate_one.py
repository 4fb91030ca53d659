"""``ezmia_degenerate_one``: EZ-MIA (Ilić et al. 2026, https://arxiv.org/abs/2601.12104) with degenerate
texts scored 1 instead of the authors' 0: privauditor's variant, not the authors' rule.

Everything but that is :mod:`.ezmia` (the error zone, the ratio r / (1 + r), ``min_tokens``, the views).
A degenerate text (fewer than ``min_tokens`` error-zone tokens, or no negative target-minus-reference
difference: r = ∞) is the target's best memorised kind of text; the authors' code
(github.com/JetBrains-Research/ez-mia at commit aa0b6b7, ``mia/ez_score.py`` lines 43-44 and 48-52)
scores it 0, with the least likely members, and this variant scores it 1, above every other text
(r / (1 + r) < 1). Where a model memorised most members the two differ most: the variant finds them,
``ezmia`` ranks them last. It reads the same stored signals as ``ezmia``, so running both costs no
further pass. Version 1 scores exactly what ``ezmia`` version 1 (``degenerate: member``) did.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ATTACKS
from .ezmia import ErrorZoneAttack


@ATTACKS.register("ezmia_degenerate_one")
@dataclass
class ErrorZoneDegenerateOneAttack(ErrorZoneAttack):
    """EZ-MIA's score with degenerate texts (no error zone to speak of, or r = ∞) scored 1, not 0."""

    name = "ezmia_degenerate_one"
    version = 1
    degenerate_score = 1.0
