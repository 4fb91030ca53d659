"""The tests over blocks that ``findings.md`` and the board run on one view of the results.

Given block → technique → AUC (:func:`privauditor.orchestrator.report.blocks.block_values`, the
headline's), :func:`run` ranks the techniques present in **every** block (the complete-block rule: a
technique is ranked only where every ranked technique is measured; the others are *partial*, each
compared within the blocks it shares), and over those blocks computes, with
:mod:`privauditor.orchestrator.report.ranking`:

- mean AUC and mean rank per technique (1 = leakiest), with the range of its ranks over blocks;
- Friedman's test, pairwise Wilcoxon signed-rank tests with Holm over every pair, Nemenyi's critical
  difference and the cliques a critical-difference diagram draws (:mod:`.cd_diagram`);
- with a sweep's hypothesis (:mod:`.hypothesis`): Page's L for its order of classes (each class's mean AUC
  per block).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import blocks as blk
from . import ranking
from .cd_diagram import cliques, draw

ALPHA = 0.05


@dataclass
class Battery:
    blocks: list[Any]  # the complete blocks, sorted
    names: list[str]  # the ranked techniques, by mean rank (leakiest first)
    matrix: np.ndarray  # (blocks, names) AUCs
    mean_auc: dict[str, float]
    mean_rank: dict[str, float]
    rank_range: dict[str, tuple[float, float]]  # lowest and highest rank in any block
    friedman: dict[str, Any] | None  # None: fewer than 3 techniques or 2 blocks
    pairs: list[dict[str, Any]]  # Wilcoxon + Holm, every pair
    cd: float | None  # Nemenyi's critical difference in mean rank
    cliques: list[set[str]]
    coverage: dict[str, int]  # blocks per technique, over every block given
    partial: dict[str, dict[str, Any]] = field(default_factory=dict)  # technique -> its own comparison
    page: dict[str, Any] | None = None  # with the hypothesis: Page's L of its class order
    page_problem: str = ""  # why Page's test could not run

    @property
    def significant(self) -> list[dict[str, Any]]:
        return [p for p in self.pairs if p["significant"]]

    @property
    def smallest_p(self) -> float:
        """The smallest two-sided p an exact signed-rank test can give over these blocks: 2 / 2^n."""
        return 2.0 / 2 ** len(self.blocks)


def run(values: dict[Any, dict[str, float]], hypothesis: Any = None, seed: int = 0) -> Battery | None:
    """The battery over the complete blocks of ``values`` (None: fewer than 2 techniques or 1 block)."""
    blocks, names, matrix = ranking.complete_blocks(values)
    if len(names) < 2 or not blocks:
        return None
    means, low, high = ranking.rank_ranges(matrix)
    order = sorted(range(len(names)), key=lambda j: (means[j], names[j]))
    names, matrix = [names[j] for j in order], matrix[:, order]
    means, low, high = means[order], low[order], high[order]
    enough = len(names) >= 3 and len(blocks) >= 2
    pairs = ranking.pairwise_wilcoxon(matrix, names, ALPHA) if len(blocks) >= 2 else []
    significant = {frozenset((p["a"], p["b"])) for p in pairs if p["significant"]}
    found = Battery(
        blocks=blocks,
        names=names,
        matrix=matrix,
        mean_auc={n: float(matrix[:, j].mean()) for j, n in enumerate(names)},
        mean_rank={n: float(means[j]) for j, n in enumerate(names)},
        rank_range={n: (float(low[j]), float(high[j])) for j, n in enumerate(names)},
        friedman=ranking.friedman(matrix) if enough else None,
        pairs=pairs,
        cd=ranking.nemenyi_cd(len(names), len(blocks)) if len(blocks) >= 1 else None,
        cliques=cliques(names, list(means), significant),
        coverage=ranking.coverage(values),
    )
    found.partial = _partial(values, names)
    if hypothesis is not None:
        found.page, found.page_problem = _page(found, hypothesis)
    return found


def battery_of(
    rows: Sequence[blk.R], attack: str, view: str, hypothesis: Any = None
) -> tuple[Battery | None, blk.Picked[blk.R]]:
    """The battery of one (attack, view) over :func:`.blocks.block_values`, and the rows it picked for the
    reads that pair techniques by seed (block → technique → seed → row; :func:`.blocks.trajectories`)."""
    picked = blk.chosen(blk.trajectories(rows, attack), view)
    return run(blk.block_values(rows, attack, view), hypothesis), picked


def _partial(values: dict[Any, dict[str, float]], ranked: list[str]) -> dict[str, dict[str, Any]]:
    """Each technique missing from some blocks, ranked with the ranked ones in the blocks it shares."""
    others = sorted({n for row in values.values() for n in row} - set(ranked))
    found = {}
    for name in others:
        blocks, names, matrix = ranking.complete_blocks(values, [*ranked, name])
        if not blocks:
            continue
        ranks = ranking.block_ranks(matrix)[:, names.index(name)]
        found[name] = {
            "blocks": len(blocks),
            "k": len(names),
            "mean_rank": float(ranks.mean()),
            "mean_auc": float(matrix[:, names.index(name)].mean()),
        }
    return found


def _page(found: Battery, hypothesis: Any) -> tuple[dict[str, Any] | None, str]:
    classes = {n: c for n, c in hypothesis.classes.items() if n in found.names}
    empty = [c for c in hypothesis.order if c not in classes.values()]
    if empty:
        return None, f"class(es) {', '.join(empty)} have no ranked technique"
    if len(hypothesis.order) < 3 or len(found.blocks) < 2:
        return None, "Page's test needs 3 classes or more and 2 blocks or more"
    table = ranking.class_matrix(found.matrix, found.names, classes, hypothesis.order)
    return ranking.page_trend(table) | {"order": list(hypothesis.order), "classes": classes}, ""


def diagram(found: Battery, path: Path, title: str) -> Path:
    """The battery's critical-difference diagram as a PNG at ``path``."""
    return draw([found.mean_rank[n] for n in found.names], found.names, found.cliques, path, title, found.cd)
