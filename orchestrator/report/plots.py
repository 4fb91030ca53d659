"""Log-log ROC curves (PNG): one figure per cell with a curve per attack.

Log-log axes show the low-FPR region that matters for privacy (Carlini et al. 2022,
https://arxiv.org/abs/2112.03570); the diagonal is chance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privauditor.tasks.infra.files import atomic_write

from .row_schema import Row

MARKERS = "osD^v<>pPhX*"


def technique_style(name: str) -> dict[str, Any]:
    """A technique's colour and marker, the same in every figure: the registered techniques in name order
    take matplotlib's 20 ``tab20`` colours and a marker each (14 today, all distinct); a defended cell
    (``full+dp-e1``) keeps its technique's colour with the next marker and a dashed line; an unregistered
    name takes a colour from its CRC. Keyword arguments of matplotlib's ``plot``: ``color`` (an RGB
    tuple), ``marker`` and ``linestyle``."""
    import zlib

    from matplotlib import colormaps

    from privauditor.tasks.adaptations import ADAPTATIONS

    known = sorted(ADAPTATIONS.names())
    base, defended = name.split("+")[0], "+" in name
    index = known.index(base) if base in known else zlib.crc32(base.encode()) % 20
    colour = colormaps["tab20"].colors[index % 20]  # type: ignore[attr-defined]  # tab20: 20 listed colours
    return {"color": colour, "marker": MARKERS[(index + defended) % len(MARKERS)],
            "linestyle": "--" if defended else "-"}  # fmt: skip


def roc_png(metrics: dict, path: Path, title: str) -> Path:
    """Draw every attack's ROC points from ``metrics`` (a cell's metrics.json) into ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Fixed margins, not tight_layout (which measures every log tick: most of the drawing time), and
    # no pyplot: a figure of its own, freed with it.
    fig = Figure(figsize=(5, 5), dpi=100)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.1, top=0.94)
    ax = fig.add_subplot()
    floor = 1.0
    for name, m in metrics.items():
        if "roc" not in m:
            continue
        points = [(f, t) for f, t in m["roc"] if f > 0 and t > 0]
        if not points:
            continue
        fpr, tpr = zip(*points, strict=True)
        floor = min(floor, min(fpr), min(tpr))
        ax.step(fpr, tpr, where="post", label=f"{name} (AUC {m['auc']:.3f})")
    ax.plot([floor, 1], [floor, 1], "k--", linewidth=0.8, label="chance")
    ax.set(xscale="log", yscale="log", xlabel="false positive rate", ylabel="true positive rate")
    ax.set_title(title, fontsize=8)
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.legend(fontsize=7, loc="lower right")
    return atomic_write(path, fig.savefig, suffix=".png")  # the suffix tells savefig the format


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both validation NLL and AUC (lower is better for both), by NLL."""
    front: list[tuple[float, float]] = []
    for nll, auc in sorted(set(points)):
        if not front or auc < front[-1][1]:
            front.append((nll, auc))
    return front


def privacy_utility_pngs(rows: list[Row], attack: str, folder: Path) -> list[Path]:
    """Per (model, dataset): each technique's trajectory (validation NLL, ``attack``'s AUC) over its
    checkpoints, means over seeds, epochs labelled, and the Pareto frontier of all points marked.
    Written to ``folder/<model>__<dataset>.png``; returns the paths."""
    from collections import defaultdict

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from privauditor.tasks.spec.resolved import slug

    from .blocks import measured
    from .summary import technique

    curves: dict[tuple[str, str], dict[str, dict[float, list[tuple[float, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for r in rows:
        if r["attack"] == attack and (epoch := r["epoch"]) is not None:
            point = (measured(r, "utility_loss"), measured(r, "auc"))
            curves[(r["model"], r["dataset"])][technique(r)][epoch].append(point)
    written = []
    for (model, dataset), techniques in sorted(curves.items()):
        fig = Figure(figsize=(6.5, 4.5), dpi=100)
        FigureCanvasAgg(fig)
        fig.subplots_adjust(left=0.11, right=0.74, bottom=0.12, top=0.92)
        ax = fig.add_subplot()
        every = []
        for name, epochs in sorted(techniques.items()):
            points = [tuple(sum(v) / len(v) for v in zip(*epochs[e], strict=True)) for e in sorted(epochs)]
            every += points
            ax.plot(
                *zip(*points, strict=True), markersize=3, linewidth=1, label=name, **technique_style(name)
            )
            ax.annotate(str(max(epochs)), points[-1], fontsize=6, xytext=(2, 2), textcoords="offset points")
        front = pareto(every)
        ax.step(
            *zip(*front, strict=True),
            where="post",
            color="k",
            linewidth=1.6,
            alpha=0.35,
            label="Pareto frontier",
        )
        ax.axhline(0.5, color="k", linewidth=0.6, linestyle="--")
        ax.set(
            xlabel="validation NLL (nats, lower = more useful)", ylabel=f"{attack} AUC (higher = leaks more)"
        )
        ax.set_title(
            f"{model} on {dataset}: privacy–utility over checkpoints (last epoch labelled)", fontsize=8
        )
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
        path = Path(folder) / f"{slug(model)}__{slug(dataset)}.png"
        written.append(atomic_write(path, fig.savefig, suffix=".png"))
    return written


def score_histograms_png(panels: list[tuple[str, list[float], list[float]]]) -> bytes:
    """Members' and non-members' scores side by side, one panel per ``(title, member scores, non-member
    scores)``, each side's histogram normalised to density (the two files' sizes differ) over the same
    bins: how far the attack pulls the members apart is what the AUC summarises. PNG bytes, to embed."""
    import io

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.4 * len(panels), 2.8), dpi=100)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.18, top=0.86, wspace=0.28)
    for i, (title, members, nonmembers) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        bins = min(30, max(8, len(members) // 2))
        edges = np.histogram_bin_edges(np.r_[members, nonmembers], bins=bins).tolist()
        sides = ((nonmembers, "#1f77b4", "non-members"), (members, "#c0392b", "members"))
        for scores, colour, label in sides:
            ax.hist(scores, edges, density=True, alpha=0.55, color=colour, label=f"{label} ({len(scores)})")
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("score (higher: more member-like)", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6)
    fig.axes[0].set_ylabel("density", fontsize=7)
    data = io.BytesIO()
    fig.savefig(data, format="png")
    return data.getvalue()
