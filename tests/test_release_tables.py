"""A release's tables: the confirmatory verdict (confirmed, refuted, not established) from Page's L of the
order and of its reverse, and the committed release's tables rebuilt byte for byte from its records."""

from __future__ import annotations

import numpy as np
import pytest

from privauditor.orchestrator.board.release_tables import _page_line
from privauditor.orchestrator.report import battery
from privauditor.orchestrator.sweepfile.hypothesis import parse

CLAIM = parse({"classes": {"prompt": "soft", "ptuning": "soft", "lora": "adapters", "ia3": "adapters",
                           "full": "output", "head": "output"}, "order": ["soft", "adapters", "output"]})  # fmt: skip


def values(means, blocks=8, spread=0.01, seed=0):
    """block -> technique -> AUC: each class at its mean, with a little noise per technique and block."""
    rng = np.random.default_rng(seed)
    classes = CLAIM.classes
    return {(f"m{i}", "finance"): {t: means[c] + rng.normal(0, spread) for t, c in classes.items()}
            for i in range(blocks)}  # fmt: skip


@pytest.mark.parametrize(
    ("means", "verdict"),
    [
        ({"soft": 0.5, "adapters": 0.6, "output": 0.7}, "confirmed"),
        ({"soft": 0.7, "adapters": 0.6, "output": 0.5}, "refuted"),
        ({"soft": 0.6, "adapters": 0.6, "output": 0.6}, "not established"),
    ],
)
def test_the_verdict_reads_page_of_the_order_and_of_its_reverse(means, verdict):
    found = battery.run(values(means, spread=0.05 if verdict == "not established" else 0.01), CLAIM)
    line, said = _page_line(found, CLAIM)
    assert said == verdict and "one-sided, 8 blocks, soft < adapters < output" in line
    forward, reverse = (float(part.split("p = ")[1].split(" ")[0].rstrip(";,")) for part in line.split("; "))
    assert (forward <= 0.05) == (verdict == "confirmed") and (reverse <= 0.05) == (verdict == "refuted")
