"""How a leaderboard figure is written on a page or in a table (the HTML leaderboard, the board's site,
an audit's report and the Markdown summaries share these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def tpr_text(row: Mapping[str, Any], rate: str) -> str:
    """A low-FPR rate as a page shows it: ``0.120 [0.085, 0.163]``, ``few`` where fewer than 10 false
    positives were expected at its target, and ``of N`` for the TPR at 0 false positives."""
    value = row.get(rate)
    if value is None:
        return "-"
    text = f"{value:.3f}"
    if row.get(f"{rate}_ci_low") is not None:
        text += f" [{row[f'{rate}_ci_low']:.3f}, {row[f'{rate}_ci_high']:.3f}]"
    if rate == "tpr_at_0fp":
        return text + f" of {row['n_nonmembers']}"
    return text + (" (few non-members)" if row.get(f"{rate}_few") else "")


def fraction_text(fraction: float | None) -> str:
    """A trainable fraction as a percentage with two significant digits (``36 %``, ``2.3 %``, ``0.012 %``)."""
    if fraction is None:
        return "-"
    percent = 100 * fraction
    return f"{percent:.0f} %" if percent >= 10 else f"{percent:.2g} %"


def markdown_table(header: list[str], body: list[list[Any]]) -> str:
    """A Markdown table (GitHub's pipe tables), one row per ``body`` entry; a row whose cells do not match
    the header is an error, never a shifted table."""
    if any(len(row) != len(header) for row in body):
        raise ValueError(f"a Markdown row does not have the {len(header)} cells of its header {header}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in body])


def number(value: float | None) -> str:
    """Three decimals; ``-`` for a missing value or NaN."""
    return "-" if value is None or value != value else f"{value:.3f}"


def epoch_table(by_epoch: dict[str, dict[float, list[float]]]) -> str:
    """A markdown table of each technique's mean value at each epoch (``-`` where it has none)."""
    import numpy as np

    epochs = sorted({e for by in by_epoch.values() for e in by})
    body = [
        [n, *(number(float(np.mean(by_epoch[n][e]))) if by_epoch[n].get(e) else "-" for e in epochs)]
        for n in sorted(by_epoch)
    ]
    return markdown_table(["technique", *(f"epoch {e:g}" for e in epochs)], body)
