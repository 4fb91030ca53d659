"""The HTML leaderboard: no network; its images are PNG files beside it (``privacy_utility.png``, and
``plots/``), linked by relative address so that the page stays small (the default's was 3.2 MB with its
32 images embedded, 0.33 MB without), loaded as they scroll into view and opened full size on a click.

It opens with the findings' ranking (one headline number per technique), then the per-adaptation and
per-attack summaries (mean ± std AUC), the privacy–utility view (each cell's AUC under the findings'
attack against its validation NLL), a sortable table of every (cell, attack) row at the cell's last
checkpoint (click a header to sort; every checkpoint's rows are in the CSV and Parquet files) and the
log-log ROC images of the cells with the highest AUC.

The pages are jinja2 templates under ``templates/`` (autoescaped): ``base.html.j2``, the layout the
board's pages share (style, the table-sorting script), ``macros.html.j2``, tables and embedded images,
and this page's ``leaderboard.html.j2`` and ``headline.html.j2``.
"""

from __future__ import annotations

import base64
import functools
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from markupsafe import Markup

MAX_ROC_IMAGES = 24


class Link(NamedTuple):
    """A table cell that links (text and address are escaped); a list of links is one cell, space-separated.
    Every other cell is escaped text, None shown as -."""

    text: str
    href: str


@functools.cache
def environment():
    """The pages' templates (``templates/``: ``base.html.j2``, the layout; ``macros.html.j2``, tables and
    images), every value autoescaped; the ``base64`` filter embeds a PNG, the ``link`` and ``links``
    tests find a cell's Link or list of Links."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("privauditor.orchestrator.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["base64"] = lambda data: base64.b64encode(data).decode()
    env.tests["link"] = lambda value: isinstance(value, Link)
    env.tests["links"] = lambda value: isinstance(value, list) and all(isinstance(v, Link) for v in value)
    return env


def render(name: str, **context: Any) -> Markup:
    """The template ``name`` rendered with ``context``: HTML, so marked safe to go into another page."""
    return Markup(environment().get_template(name).render(**context))


def privacy_utility_png(found: Sequence[Mapping[str, Any]]) -> bytes:
    """Scatter: per cell at its last checkpoint, validation NLL (utility, lower is better) against the
    findings' attack's AUC (one attack, not the largest of many, which is biased up); one colour and
    marker per technique, never shared. ``found``: a results folder's rows or the board's cell rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .headline import ATTACK as PRIMARY_ATTACK
    from .plots import technique_style
    from .summary import final, technique

    chosen = {r["cell_id"]: r for r in final(found) if r["attack"] == PRIMARY_ATTACK}
    names = sorted({technique(r) for r in chosen.values()})
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=100)
    for adaptation in names:
        points = [(r["utility_loss"], r["auc"]) for r in chosen.values() if technique(r) == adaptation]
        style = technique_style(adaptation)
        losses, aucs = zip(*points, strict=True)
        ax.scatter(losses, aucs, label=adaptation, s=26, color=style["color"], marker=style["marker"])
    ax.set(xlabel="validation NLL (utility, lower is better)", ylabel=f"{PRIMARY_ATTACK} AUC (privacy risk)")
    ax.axhline(0.5, color="k", linewidth=0.6, linestyle="--")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def headline(out: Path, found: Sequence[Mapping[str, Any]]) -> Markup:
    """The headline (:mod:`.headline`): findings.md's ranking, the same attack, checkpoint and blocks."""
    from privauditor.orchestrator.sweepfile.hypothesis import of_sweep

    from .battery import battery_of
    from .headline import ATTACK, auc_text, rank_text, view_of

    view = view_of(of_sweep(out)[0])
    ranked = battery_of(found, ATTACK, view)[0]
    if ranked is None:
        return render("headline.html.j2", attack=ATTACK, view=view, body=None)
    body = [
        [i, name, auc_text(ranked, name), rank_text(ranked, name)] for i, name in enumerate(ranked.names, 1)
    ]
    return render("headline.html.j2", attack=ATTACK, view=view, body=body, blocks=len(ranked.blocks))


def _address(out: Path, path: Path) -> str:
    """``path``'s address relative to the page in ``out``."""
    return Path(path).relative_to(out).as_posix()


def _beside(out: Path, path: Path, data: bytes) -> str:
    """``data`` written to ``path`` (atomically), and its address relative to the page in ``out``."""
    from privauditor.tasks.infra.files import atomic_write

    atomic_write(path, lambda p: p.write_bytes(data))
    return _address(out, path)


#: the columns of leaderboard.html's table of every (cell, checkpoint, attack) row
ROWS_HEADER = ["model", "technique", "dataset", "seed", "epoch", "best", "attack", "access", "AUC", "CI low",
               "CI high", "TPR@1%FPR [95% CI]", "TPR at 0 FP of N", "val NLL", "trainable"]  # fmt: skip
#: the columns a reader filters that table by
ROW_FILTERS = ["model", "technique", "dataset", "attack", "access"]


def packed(rows: list[list[Any]]) -> str:
    """Rows as the page embeds them: compact JSON, gzip (no timestamp: the same rows give the same bytes),
    base64. The page's script inflates them with the browser's ``DecompressionStream`` and shows them a page
    at a time: a page opened from ``file://`` cannot fetch a file beside it, and the default run's 5,000 rows
    as HTML would be most of the page's weight."""
    import gzip
    import json

    data = json.dumps(rows, separators=(",", ":"), allow_nan=False).encode()
    return base64.b64encode(gzip.compress(data, mtime=0)).decode()


def leaderboard_html(out: Path, found: Sequence[Mapping[str, Any]]) -> str:
    """The page of the rows ``found``: a results folder's (:func:`.leaderboard.rows`) or the board's cell
    rows (:mod:`privauditor.orchestrator.board.merge`), so any mapping of the leaderboard's columns."""
    from .formats import fraction_text, tpr_text
    from .row_schema import trained_rows
    from .summary import APART_HEADER, SUMMARY_HEADER, apart_table, final, summary, technique

    found = trained_rows(found)  # the shipped forms: findings.md's *As shipped*, the board's filter
    audits = bool(found) and all(r["cell_id"].startswith("audit__") for r in found)
    out = Path(out)
    plots = out / "plots"
    context: dict[str, Any] = {}
    if found:
        context = {
            "headline": "" if audits else headline(out, found),  # audits are not ranked
            "summary_header": SUMMARY_HEADER,
            "by_adaptation": summary(found, "adaptation"),
            "by_attack": summary(found, "attack"),
            "apart_header": APART_HEADER,
            "apart": apart_table(found),  # attacks without a row in some cells: not in the means above
            "privacy_utility": _beside(out, out / "privacy_utility.png", privacy_utility_png(found)),
            # findings.md's Answer: mean ranks over complete blocks, Wilcoxon-Holm cliques
            "diagrams": [(p.stem, _address(out, p)) for p in sorted(plots.glob("cd_*.png"))],
            "curves": [(p.stem, _address(out, p)) for p in sorted((plots / "privacy_utility").glob("*.png"))],
        }
    last = {(r["cell_id"], r["epoch"]) for r in final(found)}
    every = [
        [
            (r["cell_id"], r["epoch"]) in last, r["model"], technique(r), r["dataset"], r["seed"], r["epoch"],
            r["best"], r["attack"], r.get("access", "?"), f"{r['auc']:.3f}", f"{r['auc_ci_low']:.3f}",
            f"{r['auc_ci_high']:.3f}", tpr_text(r, "tpr_at_1pct_fpr"), tpr_text(r, "tpr_at_0fp"),
            f"{r['utility_loss']:.3f}", f"{r['trainable_params']} ({fraction_text(r.get('trainable_fraction'))})",
        ]
        for r in sorted(found, key=lambda r: -r["auc"])
    ]  # fmt: skip
    ranked = sorted({r["cell_id"]: r["auc"] for r in found}.items(), key=lambda kv: -kv[1])
    images = [(cid, plots / f"{cid}.png") for cid, _ in ranked[:MAX_ROC_IMAGES]]
    return str(
        render(
            "leaderboard.html.j2",
            title="privauditor audits" if audits else "privauditor leaderboard",
            cells=len({r["cell_id"] for r in found}),
            rows=found,
            header=ROWS_HEADER,
            filters=ROW_FILTERS,
            packed=packed(every),
            roc=[(cid, _address(out, p)) for cid, p in images if p.exists()],
            **context,
        )
    )
