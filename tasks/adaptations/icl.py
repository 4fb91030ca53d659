"""``icl``: in-context learning as an adaptation (Wen et al. 2024, "Membership Inference Attacks Against
In-Context Learning", https://arxiv.org/abs/2409.01380; PrivAuditor's code lists it beside the trained
techniques).

Nothing is trained. The "adapted model" is the base with member records as demonstrations in its
context: the trained records (members, then known members), shuffled with the cell's seed, are cut into
prompts of ``demonstrations`` records each (the last may hold fewer), each record written as the model
sees one in training (prompt, then target) and followed by a newline. Every record is read in the prompt
that holds it; every other text the cell reads (non-members, population, validation) in one prompt drawn
for it with the seed. A text's scored positions are its own target tokens, exactly as without context.

The prompts' record ids are written to the cell folder (``demonstrations.json``, which stands in for
``adapter/``; its hash is the adaptation hash) and go nowhere else: no public export reads it.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..infra.errors import PrivauditorError
from . import ADAPTATIONS
from ._base import Adaptation, freeze

DEMONSTRATIONS_FILE = "demonstrations.json"


@ADAPTATIONS.register("icl")
@dataclass
class InContextLearning(Adaptation):
    """The base, reading ``demonstrations`` member records in front of each text."""

    demonstrations: int = 4  # records per prompt

    name = "icl"
    paper = "https://arxiv.org/abs/2409.01380"
    default_lr = 0.0
    default_epochs = 0
    trains = False
    in_context = True

    def __post_init__(self) -> None:
        if not isinstance(self.demonstrations, int) or self.demonstrations < 1:
            raise PrivauditorError(
                f"adaptation 'icl': demonstrations must be a positive int, not {self.demonstrations!r}"
            )

    def apply(self, model: Any, family: Any) -> Any:
        freeze(model)
        return model

    def save(self, model: Any, out_dir: Path) -> None:
        raise PrivauditorError(
            "adaptation 'icl' has no weights: its prompts are the cell's demonstrations.json"
        )

    def prompts(self, trained: Sequence[Any], seed: int) -> list[list[Any]]:
        """The trained records cut into prompts of ``demonstrations`` each, in a seeded order."""
        order = list(trained)
        random.Random(f"icl:{seed}").shuffle(order)
        return [order[i : i + self.demonstrations] for i in range(0, len(order), self.demonstrations)]

    def contexts(self, split: Any, seed: int) -> tuple[dict[str, str], dict[str, Any]]:
        """(sample id → the text in front of its prompt, the record of which ids are in which prompt)."""
        prompts = self.prompts(split.trained, seed)
        if not prompts:
            raise PrivauditorError("adaptation 'icl' needs at least one member to demonstrate")
        texts = ["".join(f"{e.prompt}{e.target}\n" for e in prompt) for prompt in prompts]
        contexts: dict[str, str] = {}
        drawn = random.Random(f"icl-assign:{seed}")
        for index, prompt in enumerate(prompts):
            contexts |= {e.sample_id: texts[index] for e in prompt}
        assigned = {}
        for part in ("nonmembers", "validation", "population"):
            for e in getattr(split, part):
                assigned[e.sample_id] = drawn.randrange(len(prompts))
                contexts[e.sample_id] = texts[assigned[e.sample_id]]
        record = {"prompts": [[e.sample_id for e in p] for p in prompts], "assigned": assigned}
        return contexts, record


def write_demonstrations(record: dict[str, Any], folder: Path) -> str:
    """Write the prompts' record ids to ``folder`` and return their hash (the adaptation hash)."""
    data = json.dumps(record, sort_keys=True, indent=1).encode()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{DEMONSTRATIONS_FILE}.tmp"
    tmp.write_bytes(data)
    tmp.replace(folder / DEMONSTRATIONS_FILE)
    return hashlib.sha256(data).hexdigest()
