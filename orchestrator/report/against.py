"""One results folder's ranking against another's: does the order of techniques carry over?

``privauditor report DIR --against OTHER`` adds a section to ``DIR/findings.md`` that ranks the
techniques of both folders by the same battery (:func:`privauditor.orchestrator.report.battery.battery_of`:
the same attack, the same view, each folder over its own complete blocks), and for the techniques ranked
in both gives:

- their mean ranks side by side, re-ranked among the shared techniques only (1 = leakiest), and
  Kendall's τ-b between the two orders with its two-sided p-value (``scipy.stats.kendalltau``), the
  number of techniques being its sample size;
- how fast each technique's members become identifiable: per block, the first checkpoint (in epochs)
  at which the attack's AUC, averaged over seeds, reaches ``CANARY_AUC``; "-" where no checkpoint does.

Each folder's own blocks are its units; the comparison says whether two sets of blocks (e.g. a real
base's and the tiny bases') order the techniques alike, not why.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy.stats import kendalltau, rankdata

from . import blocks as blk
from .battery import battery_of
from .formats import markdown_table
from .row_schema import Row

#: the AUC a technique's members must reach to count as identifiable
CANARY_AUC = 0.95


def first_epochs(
    rows: list[Row], attack: str, level: float = CANARY_AUC
) -> dict[str, dict[blk.Block, float | None]]:
    """technique → block → the first checkpoint epoch whose seed-mean AUC is ≥ ``level`` (None where
    none is), over the undefended rows of ``attack``."""
    found: dict[str, dict[blk.Block, float | None]] = {}
    for block, techniques in blk.trajectories(rows, attack).items():
        for technique, seeds in techniques.items():
            by_epoch: dict[float, list[float]] = defaultdict(list)
            for points in seeds.values():
                for row in points:
                    by_epoch[float(blk.measured(row, "epoch"))].append(float(blk.measured(row, "auc")))
            reached = [e for e, aucs in sorted(by_epoch.items()) if np.mean(aucs) >= level]
            found.setdefault(technique, {})[block] = reached[0] if reached else None
    return found


def _epochs(by_block: dict[blk.Block, float | None], blocks: list[blk.Block]) -> str:
    """One entry per block, in ``blocks`` order ('-': never reached, '?': not run there)."""
    values = [by_block.get(b, "?") for b in blocks]
    return " / ".join("-" if v is None else v if v == "?" else f"{v:g}" for v in values)


def against(
    here: list[Row],
    there: list[Row],
    names: tuple[str, str],
    attack: str = "loss",
    view: str = "last",
) -> list[str]:
    """The Markdown section comparing the rows ``here`` with ``there`` (``names``: how each is called)."""
    ours, theirs = battery_of(here, attack, view)[0], battery_of(there, attack, view)[0]
    title = [f"## Against {names[1]}", ""]
    if ours is None or theirs is None:
        missing = names[0] if ours is None else names[1]
        return title + [f"No ranking to compare: {missing} has no complete block under `{attack}`.", ""]
    shared = [n for n in ours.names if n in theirs.names]
    only = sorted(set(ours.names) ^ set(theirs.names))
    a = rankdata([ours.mean_rank[n] for n in shared])
    b = rankdata([theirs.mean_rank[n] for n in shared])
    epochs = first_epochs(here, attack), first_epochs(there, attack)
    lines = title + [
        f"`{attack}` at each cell's {view} checkpoint, each folder ranked over its own complete blocks "
        f"({len(ours.blocks)} here, {len(theirs.blocks)} in {names[1]}); {len(shared)} techniques ranked "
        "in both, re-ranked among themselves (1 = leakiest). First epoch to AUC ≥ "
        f"{CANARY_AUC}: per block, the first checkpoint whose seed-mean AUC reaches it ('-': none); "
        f"blocks {', '.join('×'.join(b) for b in ours.blocks)} here and "
        f"{', '.join('×'.join(b) for b in theirs.blocks)} in {names[1]}.",
        "",
    ]
    body = [
        [n, f"{a[i]:g}", f"{b[i]:g}", f"{ours.mean_auc[n]:.3f}", f"{theirs.mean_auc[n]:.3f}",
         _epochs(epochs[0].get(n, {}), ours.blocks), _epochs(epochs[1].get(n, {}), theirs.blocks)]
        for i, n in enumerate(shared)
    ]  # fmt: skip
    header = ["technique", f"rank, {names[0]}", f"rank, {names[1]}", f"mean AUC, {names[0]}",
              f"mean AUC, {names[1]}", f"first epoch to AUC ≥ {CANARY_AUC}, {names[0]}",
              f"first epoch to AUC ≥ {CANARY_AUC}, {names[1]}"]  # fmt: skip
    lines += [markdown_table(header, body), ""]
    if len(shared) >= 3:
        tau = kendalltau(a, b)
        lines.append(
            f"Kendall's τ-b between the two orders: {tau.statistic:+.3f} (two-sided p = {tau.pvalue:.2g}, "
            f"{len(shared)} techniques; `scipy.stats.kendalltau`)."
        )
    else:
        lines.append(f"Too few shared techniques ({len(shared)}) for a rank correlation.")
    if only:
        lines.append(f"Ranked in one folder only: {', '.join(f'`{n}`' for n in only)}.")
    return lines + [""]
