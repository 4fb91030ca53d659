"""The overview's "Techniques" section: the battery of :mod:`.ranked` as HTML.

It shows the ranked techniques (trainable fraction, mean AUC, mean rank with the range of its ranks over
blocks), Friedman's p, how many Wilcoxon–Holm pairs are significant, the critical-difference diagram
(a PNG the site holds, ``cd.png``), which technique is in which block and which blocks are complete,
the partial techniques with their own comparison, and Page's test of a sweep's hypothesis when the
build was given one (``board build STORE --out SITE --hypothesis SWEEP``). :func:`moves_html` is the
history page's account of how the ranking changed between releases (:func:`.ranked.moves`).
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from privauditor.orchestrator.report import ranking
from privauditor.orchestrator.report.battery import ALPHA, Battery
from privauditor.orchestrator.report.headline import auc_text, rank_text, view_of
from privauditor.orchestrator.report.html import Link, render
from privauditor.tasks.spec.resolved import slug

from .ranked import RANKING_ATTACK, fraction_of

CD_PICTURE = "cd.png"


def _link(name: str) -> Link:
    return Link(name, f"techniques/{slug(name)}.html")


def _p(value: float) -> str:
    return f"{value:.2g}"


def diagram_title(found: Battery, view: str = "last") -> str:
    return (
        f"{RANKING_ATTACK} AUC, {view} checkpoint: mean rank over {len(found.blocks)} blocks (1 = leakiest)"
    )


def section(
    found: Battery | None, values: dict, spans: dict[str, tuple[float, float]], hypothesis: Any = None,
    page: Battery | None = None, registration: Any = None, sweep: str = "",
) -> Markup:  # fmt: skip
    """The section (``templates/board/techniques.html.j2``); ``values`` is block → technique → value (what
    the battery was run on), ``spans`` the techniques' trainable fractions, ``page`` the battery Page's
    test ran on."""
    ranked = set(found.names) if found else set()
    complete = set(found.blocks) if found else set()
    coverage = [
        [_link(n), fraction_of(spans, n), c, "ranked" if n in ranked else "partial"]
        for n, c in ranking.coverage(values).items()
    ]
    blocks = [
        [b[0], b[1], " ".join(sorted(row)), "yes" if b in complete else "no"] for b, row in values.items()
    ]
    partial = []
    if found is not None:
        partial = [[_link(n), fraction_of(spans, n), p["blocks"], f"{p['mean_rank']:.2f} of {p['k']}", f"{p['mean_auc']:.3f}"]
                   for n, p in sorted(found.partial.items())]  # fmt: skip
    return render(
        "board/techniques.html.j2",
        attack=RANKING_ATTACK,
        view=view_of(hypothesis),
        ranking=None if found is None else _ranking(found, spans, len(values), view_of(hypothesis)),
        coverage=coverage,
        blocks=blocks,
        partial=partial,
        hypothesis=None if hypothesis is None else _hypothesis(hypothesis, page, registration, sweep),
    )


def _ranking(found: Battery, spans: dict[str, tuple[float, float]], blocks: int, view: str) -> dict[str, Any]:
    body = []
    for i, name in enumerate(found.names, 1):
        body.append([i, _link(name), fraction_of(spans, name), auc_text(found, name), rank_text(found, name)])
    n = len(found.blocks)
    tests = f"{n} complete blocks of {blocks}. "
    if found.friedman:
        f = found.friedman
        tests += f"Friedman χ²({f['df']}) = {f['statistic']:.2f}, p = {_p(f['p_value'])}. "
    else:
        tests += "Friedman: not run (it needs 3 techniques or more and 2 blocks or more). "
    pairs = found.significant
    shown = ", ".join(f"{p['a']} {'>' if p['median_difference'] > 0 else '<'} {p['b']}" for p in pairs)
    tests += (f"Wilcoxon signed-rank, Holm over all {len(found.pairs)} pairs: {len(pairs)} significant at "
              f"{ALPHA}{': ' + shown if shown else ''} (the smallest p {n} blocks allow is {found.smallest_p:.3g}). "
              f"Nemenyi CD {found.cd:.2f} ranks; bars join techniques no test separates.")  # fmt: skip
    return {"body": body, "tests": tests, "title": diagram_title(found, view), "picture": CD_PICTURE}


def _hypothesis(hypothesis: Any, page: Battery | None, registration: Any, sweep: str) -> dict[str, Any]:
    shown = {"order": " < ".join(hypothesis.order), "sweep": sweep, "attack": hypothesis.attack,
             "checkpoint": hypothesis.checkpoint, "why": None,
             "attempts": registration.attempts if registration is not None else 0}  # fmt: skip
    if page is None or page.page is None:
        return shown | {"why": page.page_problem if page is not None else "no two techniques share a block"}
    result = page.page
    return shown | {
        "L": f"{result['L']:.1f}", "p": _p(result["p_value"]), "method": result["method"],
        "n_blocks": result["n_blocks"], "status": "pre-registered" if registration.confirmatory else "exploratory",
        "reason": registration.reason,
    }  # fmt: skip


def moves_html(ranks: dict[str, list]) -> Markup:
    """Techniques that swapped places with one the newer battery separates them from; the rest in words
    (``templates/board/moves.html.j2``)."""
    moved = [[m["technique"], m["before"], m["now"], f"{m['mean_rank']:.2f}", f"{m['mean_auc']:.3f}",
              ", ".join(m["separated_from"])] for m in ranks["moved"]]  # fmt: skip
    return render(
        "board/moves.html.j2", moved=moved, noise=ranks["noise"], entered=ranks["entered"], left=ranks["left"]
    )
