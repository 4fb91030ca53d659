"""``findings.md``'s exposure section and its plot: how far each technique exposes canaries trained r times.

From each cell's last checkpoint with canaries (``exposure`` in its ``extraction.json``;
privauditor.tasks.leakage.canaries): per technique and number of repeats r, the mean exposure (bits) of the
included canaries over cells, against the null (a canary the model never saw: its exposure averages
1/ln 2 = 1.44 bits; a mean of n such exposures is Gamma(n), :func:`~privauditor.tasks.leakage.canaries.null_sf`).
A table entry is starred where its one-sided p against that null stays at or below 0.01 after Holm's
correction over every entry of the table (Holm 1979, ``statsmodels.stats.multitest.multipletests``), so a
star is a family-wise claim, not one of many 1 % tests. ``exposure.png`` draws exposure against r per
technique (The Secret Sharer's figure), the null's 95 % range shaded.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from privauditor.tasks.infra.files import atomic_write
from privauditor.tasks.infra.results import Results
from privauditor.tasks.leakage.canaries import null_quantile, null_sf
from privauditor.tasks.spec.resolved import technique_of

from .formats import markdown_table
from .formats import number as _fmt
from .plots import technique_style
from .row_schema import Row

FIGURE = "exposure.png"
#: the family-wise level of the table's stars
ALPHA = 0.01


def _last_exposures(out: Path, rows: list[Row]) -> tuple[dict[str, dict[int, list[float]]], set[int]]:
    """technique -> r -> every included canary's exposure at its cell's last checkpoint; and the sizes of
    the canaries' secret spaces."""
    found: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    spaces = set()
    techniques = {r["cell_id"]: technique_of(r["cell_id"], r["adaptation"]) for r in rows}
    for cell_id in sorted({r["cell_id"] for r in rows if r.get("exposure_top") is not None}):
        record = Results(out).cell(cell_id).record()
        exposure = (record["checkpoints"][-1].get("extraction") or {}).get("exposure")
        if not exposure:
            continue
        spaces.add(exposure["space"])
        for canary in exposure["canaries"]:
            if canary["included"]:
                found[techniques[cell_id]][canary["repeats"]].append(canary["exposure"])
    return found, spaces


def exposure_png(found: dict[str, dict[int, list[float]]], space: int, path: Path) -> Path:
    """Mean exposure against repeats (log axis), a line per technique, the null's 95 % range shaded."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.09, right=0.74, bottom=0.12, top=0.93)
    ax = fig.add_subplot()
    repeats = sorted({r for by in found.values() for r in by})
    n = min(len(v) for by in found.values() for v in by.values())
    ax.axhspan(
        null_quantile(0.025, n), null_quantile(0.975, n), color="0.85", label=f"null, 95 % (mean of {n})"
    )
    for technique, by in sorted(found.items()):
        xs = sorted(by)
        ax.plot(xs, [np.mean(by[r]) for r in xs], label=technique, **technique_style(technique))
    ax.axhline(np.log2(space), color="k", linestyle=":", linewidth=0.8, label="log2 |R| (rank 1)")
    ax.set(xscale="log", xlabel="times the canary was trained (r)", ylabel="exposure (bits)")
    ax.set_xticks(repeats, [str(r) for r in repeats])
    ax.set_title("Canary exposure against repetitions", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the axes, off the lines
    return atomic_write(path, fig.savefig, suffix=".png")


def starred(found: dict[str, dict[int, list[float]]], alpha: float = ALPHA) -> dict[tuple[str, int], float]:
    """(technique, r) -> Holm-adjusted one-sided p of the mean exposure against the null, every entry of
    the table in one family; an entry is starred where it is at most ``alpha``."""
    from statsmodels.stats.multitest import multipletests

    keys = [(t, r) for t, by in sorted(found.items()) for r in sorted(by) if by[r]]
    if not keys:
        return {}
    raw = [null_sf(float(np.mean(found[t][r])), len(found[t][r])) for t, r in keys]
    _, adjusted, _, _ = multipletests(raw, alpha=alpha, method="holm")
    return {key: float(p) for key, p in zip(keys, adjusted, strict=True)}


def exposure_section(out: Path, rows: list[Row]) -> list[str]:
    """The section's lines (and ``exposure.png`` in ``out``); none without canaries."""
    found, spaces = _last_exposures(out, rows)
    if not found:
        return []
    repeats = sorted({r for by in found.values() for r in by})
    p_holm = starred(found)
    body = []
    for technique, by in sorted(found.items()):
        cells = []
        for r in repeats:
            values = by.get(r, [])
            above = values and p_holm[(technique, r)] <= ALPHA
            cells.append(f"{_fmt(float(np.mean(values)))}{' *' if above else ''}" if values else "-")
        body.append([technique, *cells])
    exposure_png(found, max(spaces), Path(out) / FIGURE)
    return [
        "## Exposure",
        "",
        "Canaries (a fixed format with a random secret of "
        f"{', '.join(str(s) for s in sorted(spaces))} candidates) trained r times; each cell's last "
        "checkpoint, the mean exposure in bits of its included canaries (exposure = log2 |R| - log2 rank of "
        "the true secret; The Secret Sharer). A model that never saw a canary gives 1.44 bits on average; "
        f"`*`: above the null with Holm-adjusted p ≤ {ALPHA} over the table's {len(p_holm)} entries "
        f"({sum(p <= ALPHA for p in p_holm.values())} starred).",
        "",
        markdown_table(["technique", *(f"r = {r}" for r in repeats)], body),
        "",
        f"![exposure against repetitions]({FIGURE})",
        "",
    ]
