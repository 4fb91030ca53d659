"""``privauditor board tables STORE --hypothesis SWEEP``: a release's tables in Markdown, from its records.

What a release page (``docs/release-*.md``) quotes, computed from the store's records alone, so that the
same records give the same bytes (a test rebuilds the committed release's tables):

- the **confirmatory test**: Page's L of the hypothesis's class order over the blocks (one-sided, at
  the hypothesis's ``alpha``), the same test of the reversed order (a *refutation* is the reversed order
  significant at that level; neither: *not established*), whether it was pre-registered, and the
  per-block class means it ran on;
- the **same test on strictly fresh blocks** (leaving out fresh split draws of formed blocks): exploratory;
- the **rankings** (the battery's: mean AUC, mean rank and its range over blocks) over every block, the
  tiny bases' and the real bases' blocks;
- **transfer**: Kendall's τ-b (``scipy.stats.kendalltau``) between the tiny and the real bases' mean ranks
  over the techniques both rank (each re-ranked among those alone), and again without the techniques at
  chance on both (mean AUC below :data:`CHANCE` on both, the rule the real-base page fixed first);
- **each attack's** mean AUC over the trained cells at their last checkpoint, tiny and real bases apart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from privauditor.orchestrator.report import battery, ranking
from privauditor.orchestrator.report.formats import markdown_table
from privauditor.orchestrator.report.headline import RANK_HEADER, rank_text
from privauditor.orchestrator.report.row_schema import TRAINED
from privauditor.tasks.infra.errors import PrivauditorError

from .check import stored_attempts, valid_records, write_attempt
from .merge import cell_rows, live
from .ranked import block_values, load_hypothesis, registration_of
from .site import of_form
from .store import Store

#: a technique is at chance on a base where its mean AUC is below this (docs/real-base.md's rule)
CHANCE = 0.55
GROUPS = ("tiny", "real")


def _p(value: float) -> str:
    return f"{value:.2g}"


def group_of(model: str) -> str:
    """``tiny`` for an offline tiny base (any pre-training seed), ``real`` for any other."""
    from privauditor.tasks.models import resolve_model

    try:
        return "tiny" if resolve_model(model).source == "tiny" else "real"
    except PrivauditorError:
        return "real"


def tables(location: str | Path, sweep: str, figures: str | Path | None = None, log: bool = True) -> str:
    """The release's tables (Markdown) from the store at ``location`` and the hypothesis of ``sweep``;
    with ``figures``, each ranking's critical-difference diagram there (``cd_<group>.png``). A
    pre-registered test that runs is a confirmatory attempt: with ``log``, the store's attempts log gets
    it (once: the same cells are the same attempt) before the tables count its attempts."""
    from privauditor.orchestrator.sweepfile.attempts import attempt_entry
    from privauditor.orchestrator.sweepfile.hypothesis import Block

    store = Store(location)
    records = of_form(valid_records(store), TRAINED)
    if not records:
        raise PrivauditorError(f"store {location} holds no records: board add a results folder first")
    claim, name = load_hypothesis(sweep)
    cells = cell_rows(records)
    values = block_values(cells, claim.attack, claim.checkpoint)
    found, problem = _tested(values, claim)
    registration = registration_of(claim, name, records)
    if log and found is not None and found.page is not None and registration.confirmatory:
        tested = set(found.blocks)
        ran = {
            r["cell_id"]
            for r in cells
            if (r["model"], r["dataset"]) in tested and r["adaptation"] in claim.classes
        }
        write_attempt(store, attempt_entry(claim, ran, found.page))
    registration = replace(registration, attempts=stored_attempts(store, claim))
    bases = {
        (r["model"], r["dataset"]): str((r["provenance"]["spec"] or {}).get("base")) for r in live(records)
    }
    drawn = {b for b in values if Block(b[0], bases.get(b, ""), b[1]).among(claim.formed_on.blocks)}
    lines = [*_confirmatory(found, problem, claim, registration, drawn), ""]
    strict = {b: v for b, v in values.items() if b not in drawn}
    if drawn:
        lines += [*_strict(strict, claim, drawn), ""]
    groups = {g: {b: v for b, v in values.items() if group_of(b[0]) == g} for g in GROUPS}
    for key, title, chosen in (
        ("every", "every block", values),
        *((g, f"{g} bases", groups[g]) for g in GROUPS),
    ):
        picture = None if figures is None else Path(figures) / f"cd_{key}.png"
        lines += [*_ranking(title, chosen, claim, picture), ""]
    lines += [*_transfer(groups), "", *_attacks(cells)]
    return "\n".join(lines).rstrip() + "\n"


def _class_matrix(found: battery.Battery, claim: Any) -> Any:
    """(blocks, classes): each class's mean AUC per block, classes in the hypothesis's order."""
    classes = {n: c for n, c in claim.classes.items() if n in found.names}
    return ranking.class_matrix(found.matrix, found.names, classes, claim.order)


def _tested(values: dict, claim: Any) -> tuple[battery.Battery | None, str]:
    """The battery with Page's test of ``claim`` over ``values``, or None and why it could not run."""
    found = battery.run(values, claim)
    if found is None or found.page is None:
        return None, f"Not run: {found.page_problem if found else 'no complete block'}."
    return found, ""


def _class_table(found: battery.Battery, claim: Any) -> list[str]:
    table = _class_matrix(found, claim)
    body = [
        [f"({m}, {d})", *(f"{v:.3f}" for v in row)] for (m, d), row in zip(found.blocks, table, strict=True)
    ]
    return markdown_table(["block", *claim.order], body).split("\n")


def _page_line(found: battery.Battery, claim: Any) -> tuple[str, str]:
    """Page's line and the verdict: confirmed (the order, p ≤ alpha), refuted (the reversed order, p ≤
    alpha) or not established."""
    forward = found.page
    assert forward is not None  # the callers check that Page's test ran
    reverse = ranking.page_trend(_class_matrix(found, claim)[:, ::-1])
    verdict = (
        "confirmed" if forward["p_value"] <= claim.alpha
        else "refuted" if reverse["p_value"] <= claim.alpha
        else "not established"
    )  # fmt: skip
    line = (
        f"Page's L = {forward['L']:.1f}, p = {_p(forward['p_value'])} ({forward['method']}, one-sided, "
        f"{forward['n_blocks']} blocks, {' < '.join(claim.order)}); the reversed order: L = {reverse['L']:.1f}, "
        f"p = {_p(reverse['p_value'])}"
    )
    return line, verdict


def _confirmatory(
    found: battery.Battery | None, problem: str, claim: Any, registration: Any, drawn: set
) -> list[str]:
    head = f"### The confirmatory test (`{claim.attack}`, {claim.checkpoint} checkpoint, α = {claim.alpha:g})"
    if found is None:
        return [head, "", problem]
    line, verdict = _page_line(found, claim)
    status = "pre-registered" if registration.confirmatory else "exploratory"
    return [
        head, "",
        f"{line}. **{verdict}** ({status}: {registration.reason}; confirmatory attempts logged in the "
        f"store: {registration.attempts}).", "",
        f"Each class's mean AUC per block (techniques ranked in every block; {len(drawn)} of the "
        f"{len(found.blocks)} blocks are fresh split draws of blocks the hypothesis was formed on):", "",
        *_class_table(found, claim),
    ]  # fmt: skip


def _strict(values: dict, claim: Any, drawn: set) -> list[str]:
    found, problem = _tested(values, claim)
    shown = ", ".join(f"({m}, {d})" for m, d in sorted(drawn))
    head = f"### Exploratory: the same test without the fresh draws ({shown})"
    if found is None:
        return [head, "", problem]
    line, verdict = _page_line(found, claim)
    return [head, "", f"{line}: {verdict} at α = {claim.alpha:g}, on blocks none of whose records formed it."]


def _ranking(title: str, values: dict, claim: Any, picture: Path | None = None) -> list[str]:
    found = battery.run(values)
    head = f"### Ranking over {title} (`{claim.attack}`, {claim.checkpoint} checkpoint; exploratory)"
    if found is None:
        return [head, "", "No two techniques share a block."]
    if picture is not None:
        picture.parent.mkdir(parents=True, exist_ok=True)
        battery.diagram(
            found, picture, f"{claim.attack} AUC over {title}: mean rank over {len(found.blocks)} blocks"
        )
    body = [[str(i), n, claim.classes.get(n, "-"), f"{found.mean_auc[n]:.3f}", rank_text(found, n)]
            for i, n in enumerate(found.names, 1)]  # fmt: skip
    partial = [f"{n} ({p['blocks']} blocks: mean rank {p['mean_rank']:.2f} of {p['k']}, AUC {p['mean_auc']:.3f})"
               for n, p in found.partial.items()]  # fmt: skip
    f = found.friedman
    omnibus = f"Friedman χ²({f['df']}) = {f['statistic']:.1f}, p = {_p(f['p_value'])}" if f else "Friedman: -"
    return [
        head, "", f"{len(found.blocks)} complete blocks, 2 seeds each averaged within a block.", "",
        *markdown_table(["rank", "technique", "class", "mean AUC", RANK_HEADER], body).split("\n"), "",
        f"{omnibus}; Wilcoxon–Holm: {len(found.significant)} of {len(found.pairs)} pairs significant at "
        f"{battery.ALPHA} (the smallest p {len(found.blocks)} blocks allow: {found.smallest_p:.2g})"
        + (f". Partial (not in every block): {'; '.join(partial)}." if partial else "."),
    ]  # fmt: skip


def _transfer(groups: dict[str, dict]) -> list[str]:
    from scipy.stats import kendalltau

    head = "### Transfer from the tiny bases to the real base (exploratory)"
    tiny, real = (battery.run(groups[g]) for g in GROUPS)
    if tiny is None or real is None:
        return [head, "", "Not computed: one of the two groups ranks fewer than two techniques."]
    shared = sorted(set(tiny.names) & set(real.names))
    lines = [head, ""]
    at_chance = [n for n in shared if tiny.mean_auc[n] < CHANCE and real.mean_auc[n] < CHANCE]
    for label, names in (("all shared", shared), (f"without those at chance on both ({', '.join(at_chance) or 'none'})",
                         [n for n in shared if n not in at_chance])):  # fmt: skip
        if len(names) < 3:
            lines.append(f"- {label}: {len(names)} techniques, too few for τ.")
            continue
        found = [battery.run({b: {n: v[n] for n in names} for b, v in groups[g].items()}) for g in GROUPS]
        ranks = [[r.mean_rank[n] for n in names] if r is not None else [] for r in found]
        tau = kendalltau(*ranks)
        lines.append(f"- {label}, {len(names)} techniques: Kendall's τ-b = {tau.statistic:+.3f} (two-sided "
                     f"p = {_p(tau.pvalue)}), mean ranks re-ranked among them in each group")  # fmt: skip
    return lines


def _attacks(cells: list[dict[str, Any]]) -> list[str]:
    last: dict[tuple, int] = {}
    for row in cells:
        if row["adaptation"] != "none" and row.get("defence", "none") == "none" and row["epoch"] is not None:
            key = (row["cell_id"], row["attack"])
            last[key] = max(last.get(key, -1), row["step"] or 0)
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in cells:
        if last.get((row["cell_id"], row["attack"])) == (row["step"] or 0) and row["auc"] is not None:
            found[row["attack"]][group_of(row["model"])].append(row["auc"])
    body = [[a, *(f"{sum(v[g]) / len(v[g]):.3f} ({len(v[g])})" if v[g] else "-" for g in GROUPS)]
            for a, v in sorted(found.items())]  # fmt: skip
    return [
        "### Each attack's mean AUC over the trained cells at their last checkpoint (exploratory)", "",
        *markdown_table(["attack", "tiny bases (cells)", "real base (cells)"], body).split("\n"),
    ]  # fmt: skip
