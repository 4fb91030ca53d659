"""Log-log ROC curves (PNG): one figure per cell with a curve per attack.

Log-log axes show the low-FPR region that matters for privacy (Carlini et al. 2022,
https://arxiv.org/abs/2112.03570); the diagonal is chance.
"""

from __future__ import annotations

from pathlib import Path

from privauditor.tasks.signals import atomic_write


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
