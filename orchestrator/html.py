"""The self-contained HTML leaderboard: no network, no external files (images are embedded).

It opens with the findings' ranking (one headline number per technique), then the per-adaptation and
per-attack summaries (mean ± std AUC), the privacy–utility view (each cell's AUC under the findings'
attack against its validation NLL), a sortable table of every (cell, attack) row at the cell's last
checkpoint (click a header to sort; every checkpoint's rows are in the CSV and Parquet files) and the
log-log ROC images of the cells with the highest AUC.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

MAX_ROC_IMAGES = 24

SCRIPT = """
document.querySelectorAll('table.sortable th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const up = th.dataset.dir !== 'asc'; th.dataset.dir = up ? 'asc' : 'desc';
  const key = r => { const t = r.cells[col].textContent; const n = parseFloat(t); return isNaN(n) ? t : n; };
  [...body.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1))
    .forEach(r => body.appendChild(r));
}));
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
table.sortable th { cursor: pointer; background: #f0f0f0; }
.grid { display: flex; flex-wrap: wrap; gap: 8px; } .grid img { width: 520px; max-width: 100%; }
"""


class Raw(str):
    """Table cell content that is already HTML (a link); every other cell is escaped, None shown as -."""


def _cell(value: Any) -> str:
    return value if isinstance(value, Raw) else html.escape("-" if value is None else str(value))


def _table(header: list[str], body: list[list[Any]], sortable: bool = False) -> str:
    cls = ' class="sortable"' if sortable else ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in r) + "</tr>" for r in body)
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def privacy_utility_png(found: list[dict[str, Any]]) -> bytes:
    """Scatter: per cell at its last checkpoint, validation NLL (utility, lower is better) against the
    findings' attack's AUC (one attack, not the largest of many, which is biased up); one colour and
    marker per technique, never shared."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .findings import PRIMARY_ATTACK
    from .summary import final, technique

    chosen = {r["cell_id"]: r for r in final(found) if r["attack"] == PRIMARY_ATTACK}
    names = sorted({technique(r) for r in chosen.values()})
    colours, markers = plt.get_cmap("tab20").colors, "osD^v<>pPhX*"
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=100)
    for i, adaptation in enumerate(names):
        points = [(r["utility_loss"], r["auc"]) for r in chosen.values() if technique(r) == adaptation]
        ax.scatter(*zip(*points, strict=True), label=adaptation, s=26, color=colours[i % 20],
                   marker=markers[i % len(markers)])  # fmt: skip
    ax.set(xlabel="validation NLL (utility, lower is better)", ylabel=f"{PRIMARY_ATTACK} AUC (privacy risk)")
    ax.axhline(0.5, color="k", linewidth=0.6, linestyle="--")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def headline(found: list[dict[str, Any]]) -> str:
    """The findings' ranking (its attack at each cell's last checkpoint, over complete (model, dataset)
    blocks, seeds averaged): the one headline number per technique, as findings.md and the board give it."""
    from .battery import battery_of
    from .findings import PRIMARY_ATTACK

    ranked = battery_of(found, PRIMARY_ATTACK, "last")[0]
    title = f"<h2>Ranking: <code>{PRIMARY_ATTACK}</code> at each cell's last checkpoint (findings.md's Answer)</h2>"
    if ranked is None:
        return title + "<p>No two techniques share a (model, dataset) block: nothing to rank.</p>"
    body = [
        [i, name, f"{ranked.mean_auc[name]:.3f}",
         f"{ranked.mean_rank[name]:.1f} [{ranked.rank_ci[name][0]:.1f}, {ranked.rank_ci[name][1]:.1f}]"]
        for i, name in enumerate(ranked.names, 1)
    ]  # fmt: skip
    header = ["rank", "technique", "mean AUC", f"mean rank [95 % CI over {len(ranked.blocks)} blocks]"]
    return title + _table(header, body)


def leaderboard_html(out: Path, found: list[dict[str, Any]]) -> str:
    from .formats import fraction_text, tpr_text
    from .summary import SUMMARY_HEADER, final, summary

    audits = bool(found) and all(r["cell_id"].startswith("audit__") for r in found)
    title = "privauditor audits" if audits else "privauditor leaderboard"  # audits are not ranked
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"]
    parts.append(f"<style>{STYLE}</style></head><body><h1>{title}</h1>")
    cells = len({r["cell_id"] for r in found})
    parts.append(
        f"<p>{cells} finished cells, {len(found)} (cell, checkpoint, attack) rows; summaries at each cell's last checkpoint.</p>"
    )
    if found:
        parts.append("" if audits else headline(found))
        parts.append(
            "<h2>Per adaptation: every attack that reads the model (controls left out)</h2>"
            + _table(["adaptation", *SUMMARY_HEADER], summary(found, "adaptation"))
        )
        parts.append("<h2>Per attack</h2>" + _table(["attack", *SUMMARY_HEADER], summary(found, "attack")))
        parts.append(
            "<h2>Privacy–utility (findings.md's attack, each cell's last checkpoint)</h2>"
            + _img(privacy_utility_png(found), "privacy-utility")
        )
        diagrams = sorted((Path(out) / "plots").glob("cd_*.png"))
        if diagrams:  # findings.md's Answer: mean ranks over complete blocks, Wilcoxon-Holm cliques
            parts.append(
                "<h2>Ranking over (model, dataset) blocks (findings.md's Answer)</h2><div class='grid'>"
                + "".join(_img(p.read_bytes(), p.stem) for p in diagrams)
                + "</div>"
            )
        curves = sorted((Path(out) / "plots" / "privacy_utility").glob("*.png"))
        if curves:
            parts.append(
                "<h2>Privacy–utility over checkpoints (findings.md's attack)</h2><div class='grid'>"
                + "".join(_img(p.read_bytes(), p.stem) for p in curves)
                + "</div>"
            )
    header = [
        "model",
        "adaptation",
        "dataset",
        "seed",
        "epoch",
        "best",
        "attack",
        "access",
        "AUC",
        "CI low",
        "CI high",
        "TPR@1%FPR [95% CI]",
        "TPR at 0 FP of N",
        "val NLL",
        "trainable",
    ]
    body = [
        [
            r["model"], r["adaptation"], r["dataset"], r["seed"], _dash(r["epoch"]), _dash(r["best"]),
            r["attack"], r.get("access", "?"), f"{r['auc']:.3f}",
            f"{r['auc_ci_low']:.3f}", f"{r['auc_ci_high']:.3f}",
            tpr_text(r, "tpr_at_1pct_fpr"), tpr_text(r, "tpr_at_0fp"),
            f"{r['utility_loss']:.3f}", f"{r['trainable_params']} ({fraction_text(r.get('trainable_fraction'))})",
        ]
        for r in sorted(final(found), key=lambda r: -r["auc"])
    ]  # fmt: skip
    parts.append(
        "<h2>Every cell and attack at its last checkpoint</h2><p>Click a column header to sort. Every "
        "checkpoint's rows are in <code>leaderboard.csv</code> and <code>leaderboard.parquet</code>.</p>"
        + _table(header, body, sortable=True)
    )
    ranked = sorted({r["cell_id"]: r["auc"] for r in found}.items(), key=lambda kv: -kv[1])
    images = [(cid, Path(out) / "plots" / f"{cid}.png") for cid, _ in ranked[:MAX_ROC_IMAGES]]
    images = [_img(p.read_bytes(), cid) for cid, p in images if p.exists()]
    if images:
        parts.append(
            "<h2>ROC curves (log-log), highest-AUC cells</h2><div class='grid'>" + "".join(images) + "</div>"
        )
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts)
