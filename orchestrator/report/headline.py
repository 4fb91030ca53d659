"""The headline: the one ranking of techniques that every page shows, defined once.

It is the Answer of ``findings.md``: the AUC of :data:`ATTACK` (or the attack ``privauditor report
--attack`` names) at the checkpoint :func:`view_of` picks, each technique's value in a (model, dataset)
block given by :func:`privauditor.orchestrator.report.blocks.block_values` (the mean over its settings of
the mean over seeds), ranked over the complete blocks by :func:`privauditor.orchestrator.report.battery.run`
(mean ranks with the range of ranks over blocks). Shown by:

- ``findings.md``'s Answer, which the end of ``privauditor run`` and ``privauditor report`` print;
- ``leaderboard.html``'s first table (:func:`privauditor.orchestrator.report.html.headline`);
- the board site's techniques section, over the board's merged cells
  (:mod:`privauditor.orchestrator.board.techniques`): for one results folder, the same numbers;
- the README's sample, a copy of the default run's Answer (``docs/findings.md``; a test keeps the two
  equal).

Each writes a technique's numbers with :func:`auc_text` and :func:`rank_text`. Every other summary on
those pages (per-adaptation or per-attack means over rows, the strongest attack) says what it averages.
"""

from __future__ import annotations

from typing import Any

#: the attack the headline ranks by: ``loss`` (Yeom et al. 2018), the one every other attack of the
#: benchmark refines (reference, neighbourhood and token-level attacks all rescale a loss), available
#: on every model
ATTACK = "loss"


def view_of(hypothesis: Any, attack: str = ATTACK) -> str:
    """The checkpoint the headline reads: the hypothesis's (``last`` or ``best``) where the hypothesis
    names ``attack``, else each cell's last."""
    return hypothesis.checkpoint if hypothesis is not None and hypothesis.attack == attack else "last"


def auc_text(found: Any, name: str) -> str:
    """A ranked technique's mean AUC over the battery's blocks."""
    return f"{found.mean_auc[name]:.3f}"


#: the column ``rank_text`` fills: a range, not a confidence interval (``ranking.rank_ranges`` says why)
RANK_HEADER = "mean rank (range over blocks)"


def rank_text(found: Any, name: str) -> str:
    """A ranked technique's mean rank and the lowest and highest rank it took in any block."""
    low, high = found.rank_range[name]
    return f"{found.mean_rank[name]:.1f} ({low:g}–{high:g})"
