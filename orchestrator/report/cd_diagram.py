"""Critical-difference diagrams of mean ranks (Demšar 2006, "Statistical comparisons of classifiers over
multiple data sets", JMLR 7, Fig. 1-2).

Mean ranks run along the axis, 1 (the leakiest technique) on the left; each technique hangs from its
mean rank on an elbow line to its label. Thick bars join the techniques of each clique: a maximal run
of techniques adjacent in mean-rank order within which no pair differs significantly, the pairwise
Wilcoxon-Holm convention of Ismail Fawaz et al.'s ``cd-diagram`` (Deep learning for time series
classification: a review, DMKD 2019) after Benavoli, Corani & Mangili (2016), JMLR 17(5). Nemenyi's
critical difference can be drawn as a scale bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from privauditor.tasks.infra.files import atomic_write


def cliques(
    names: Sequence[str], mean_ranks: Sequence[float], significant_pairs: set[frozenset[str]]
) -> list[set[str]]:
    """Maximal runs of techniques adjacent in mean-rank order with no significant pair inside.

    Runs contained in another run and single techniques are dropped. Equal mean ranks are ordered by
    name, so the result does not depend on the input order.
    """
    if len(names) != len(mean_ranks):
        raise ValueError(f"{len(names)} names for {len(mean_ranks)} mean ranks")
    order = [name for _, name in sorted(zip(mean_ranks, names, strict=True))]
    ends = []
    for start in range(len(order)):
        end = start
        while end + 1 < len(order) and not any(
            frozenset((order[end + 1], order[i])) in significant_pairs for i in range(start, end + 1)
        ):
            end += 1
        ends.append(end)
    # The end of the run from a later start is never smaller, so a run is contained in the previous
    # one exactly when both end at the same technique.
    return [
        set(order[start : end + 1])
        for start, end in enumerate(ends)
        if end > start and (start == 0 or end > ends[start - 1])
    ]


def draw(
    mean_ranks: Sequence[float],
    names: Sequence[str],
    cliques: list[set[str]],
    path: str | Path,
    title: str | None = None,
    cd: float | None = None,
) -> Path:
    """Write a critical-difference diagram PNG to ``path`` (atomically) and return the path.

    The bytes depend only on the arguments: no time stamp or software version in the metadata.

    Args:
        mean_ranks: (k,) mean rank of each technique, 1 = leakiest.
        names: the k technique names.
        cliques: groups of names not significantly different (``cliques``), one bar each.
        path: where the PNG goes.
        title: optional title above the axis.
        cd: Nemenyi's critical difference, drawn as a scale bar when given.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if len(names) != len(mean_ranks) or not names:
        raise ValueError(f"{len(names)} names for {len(mean_ranks)} mean ranks")
    k = len(names)
    ranked = sorted(zip(mean_ranks, names, strict=True))
    half = math.ceil(k / 2)  # the leakier half is labelled on the left, the rest on the right
    low, high = 1, max(k, math.ceil(max(mean_ranks)))
    depth = 0.6 + 0.3 * len(cliques)  # below the clique bars
    top = -0.6 - 0.85 * (cd is not None) - 0.6 * bool(title)
    bottom = depth + 0.55 * (half - 1) + 0.5
    fig = Figure(figsize=(max(6.0, 0.7 * k + 3), 0.36 * (bottom - top)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    left, right = (
        low - 0.35 * (high - low) - 0.5,
        max(high + 0.35 * (high - low) + 0.5, low + (cd or 0) + 0.5),
    )
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)  # y grows downwards: the axis at 0, bars and labels below it
    ax.hlines(0, low, high, color="black", linewidth=1)
    for tick in range(low, high + 1):
        ax.vlines(tick, -0.15, 0, color="black", linewidth=1)
        ax.text(tick, -0.2, str(tick), ha="center", va="bottom", fontsize=9)
    if cd is not None:
        ax.hlines(-0.9, low, low + cd, color="black", linewidth=1.5)
        ax.vlines([low, low + cd], -1.0, -0.8, color="black", linewidth=1.5)
        ax.text(low + cd / 2, -1.0, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8)
    if title:
        ax.text((left + right) / 2, top + 0.05, title, ha="center", va="top", fontsize=10)
    for row, members in enumerate(cliques):
        spots = [rank for rank, name in ranked if name in members]
        if spots:
            ax.hlines(0.45 + 0.3 * row, min(spots) - 0.05, max(spots) + 0.05, color="black", linewidth=4)
    for index, (rank, name) in enumerate(ranked):
        on_left = index < half
        step = index if on_left else k - 1 - index
        y = depth + 0.55 * step
        end = left + 0.1 if on_left else right - 0.1
        ax.plot([rank, rank, end], [0, y, y], color="black", linewidth=0.8)
        label = f"{name} ({rank:.2f})" if on_left else f"({rank:.2f}) {name}"
        ax.text(end, y - 0.08, label, ha="left" if on_left else "right", va="bottom", fontsize=9)
    metadata = {"Software": None}
    return atomic_write(
        Path(path), lambda tmp: fig.savefig(tmp, format="png", metadata=metadata), suffix=".png"
    )
