"""The overview's "Techniques" section: the battery of :mod:`.ranked` as HTML.

It shows the ranked techniques (trainable fraction, mean AUC, mean rank with its bootstrap interval over
blocks), Friedman's p, how many Wilcoxon–Holm pairs are significant, the critical-difference diagram
(a PNG the site holds, ``cd.png``), which technique is in which block and which blocks are complete,
the partial techniques with their own comparison, and Page's test of a sweep's hypothesis when the
build was given one (``board build STORE --out SITE --hypothesis SWEEP``). :func:`moves_html` is the
history page's account of how the ranking changed between releases (:func:`.ranked.moves`).
"""

from __future__ import annotations

import html
from typing import Any

from privauditor.orchestrator import ranking
from privauditor.orchestrator.battery import ALPHA, Battery
from privauditor.orchestrator.html import Raw, _table
from privauditor.tasks.spec import slug

from .ranked import RANKING_ATTACK, fraction_of

CD_PICTURE = "cd.png"


def _link(name: str) -> Raw:
    return Raw(f'<a href="techniques/{html.escape(slug(name))}.html">{html.escape(name)}</a>')


def _p(value: float) -> str:
    return f"{value:.2g}"


def diagram_title(found: Battery) -> str:
    return f"{RANKING_ATTACK} AUC, last checkpoint: mean rank over {len(found.blocks)} blocks (1 = leakiest)"


def section(
    found: Battery | None, values: dict, spans: dict[str, tuple[float, float]], hypothesis: Any = None,
    page: Battery | None = None, registration: Any = None, sweep: str = "",
) -> str:  # fmt: skip
    """The section; ``values`` is block → technique → value (what the battery was run on), ``spans`` the
    techniques' trainable fractions, ``page`` the battery Page's test ran on."""
    parts = [
        f"<h2>Techniques</h2><p>Ranked by the <code>{RANKING_ATTACK}</code> attack's AUC (the attack every "
        "other refines) at each setting's last checkpoint, undefended settings only, seeds averaged within "
        "a (model, dataset) block; only the techniques present in every block are ranked, over the blocks "
        "that hold them all. <code>none</code>, the un-adapted base, is the control: never ranked.</p>"
    ]
    if found is None:
        parts.append("<p>No two techniques share a block: nothing to rank.</p>")
    else:
        parts.append(_ranking(found, spans, len(values)))
    parts.append(_coverage(found, values, spans))
    if found is not None and found.partial:
        body = [[_link(n), fraction_of(spans, n), p["blocks"], f"{p['mean_rank']:.2f} of {p['k']}", f"{p['mean_auc']:.3f}"]
                for n, p in sorted(found.partial.items())]  # fmt: skip
        parts.append("<h3>Partial techniques</h3><p>Not in every block, so not in the tests above; each is "
                     "ranked with the ranked techniques over the blocks it shares with them.</p>"
                     + _table(["technique", "trainable", "blocks", "mean rank there", "mean AUC there"], body, True))  # fmt: skip
    if hypothesis is not None:
        parts.append(_hypothesis(hypothesis, page, registration, sweep))
    return "".join(parts)


def _ranking(found: Battery, spans: dict[str, tuple[float, float]], blocks: int) -> str:
    body = []
    for i, name in enumerate(found.names, 1):
        low, high = found.rank_ci[name]
        body.append([i, _link(name), fraction_of(spans, name), f"{found.mean_auc[name]:.3f}",
                     f"{found.mean_rank[name]:.2f} [{low:.2f}, {high:.2f}]"])  # fmt: skip
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
    alt = html.escape(diagram_title(found))
    return (_table(["rank", "technique", "trainable", "mean AUC", "mean rank [95% CI over blocks]"], body, True)
            + f"<p>{html.escape(tests)}</p><p><img alt=\"{alt}\" src=\"{CD_PICTURE}\"></p>")  # fmt: skip


def _coverage(found: Battery | None, values: dict, spans: dict[str, tuple[float, float]]) -> str:
    ranked = set(found.names) if found else set()
    counts = ranking.coverage(values)
    body = [
        [_link(n), fraction_of(spans, n), c, "ranked" if n in ranked else "partial"]
        for n, c in counts.items()
    ]
    complete = set(found.blocks) if found else set()
    blocks = [
        [b[0], b[1], " ".join(sorted(row)), "yes" if b in complete else "no"] for b, row in values.items()
    ]
    return ("<h3>Coverage</h3>"
            + _table(["technique", "trainable", f"blocks (of {len(values)})", "status"], body, True)
            + _table(["model", "dataset", "techniques", "complete"], blocks, True))  # fmt: skip


def _hypothesis(hypothesis: Any, page: Battery | None, registration: Any, sweep: str) -> str:
    order = html.escape(" < ".join(hypothesis.order))
    head = (f"The class order {order} of sweep {html.escape(sweep)} (<code>{html.escape(hypothesis.attack)}</code>, "
            f"{hypothesis.checkpoint} checkpoint), Page's L")  # fmt: skip
    if page is None or page.page is None:
        why = page.page_problem if page is not None else "no two techniques share a block"
        return f"<h3>Hypothesis</h3><p>{head}: not run ({html.escape(why)}).</p>"
    result = page.page
    status = "pre-registered" if registration.confirmatory else "exploratory"
    return (f"<h3>Hypothesis</h3><p>{head} = {result['L']:.1f}, p = {_p(result['p_value'])} ({result['method']}, "
            f"{result['n_blocks']} blocks). <b>{status}</b>: {html.escape(registration.reason)}.</p>")  # fmt: skip


def moves_html(ranks: dict[str, list]) -> str:
    """Techniques that swapped places with one the newer battery separates them from; the rest in words."""
    parts = []
    if ranks["moved"]:
        parts.append("<h3>Rankings moved</h3>" + _table(
            ["technique", "rank before", "rank now", "mean rank now", "mean AUC now", "now separated from"],
            [[m["technique"], m["before"], m["now"], f"{m['mean_rank']:.2f}", f"{m['mean_auc']:.3f}",
              ", ".join(m["separated_from"])] for m in ranks["moved"]]))  # fmt: skip
    if ranks["noise"]:
        parts.append(f"<p>Order within the noise: {html.escape(', '.join(ranks['noise']))} changed places only with "
                     "techniques no significant Wilcoxon–Holm pair separates them from.</p>")  # fmt: skip
    for key, what in (("entered", "Newly ranked"), ("left", "No longer ranked")):
        if ranks[key]:
            parts.append(f"<p>{what}: {html.escape(', '.join(ranks[key]))}.</p>")
    return "".join(parts)
