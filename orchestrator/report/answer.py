"""The "Answer" that opens ``findings.md``: which techniques leak more, and the tests that support it.

It reads one view (the sweep hypothesis's checkpoint, else each cell's last) under one attack, ranks the
techniques over the complete (model, dataset) blocks (:mod:`.battery`), and says in at most 40 lines:
the ranking with trainable fractions and mean ranks with their range over blocks; Friedman's test; the
pairwise Wilcoxon–Holm family and its critical-difference diagram; the one confirmatory test (Page's L of
the sweep's class order) and whether it was pre-registered; per adjacent pair of classes a random-effects
meta-analysis over blocks of the paired DeLong difference (Hartung–Knapp interval, τ², Holm over the
pairs) for "how much more"; and in plain words what is established and what is not. Units are blocks:
every statement is conditional on these models and datasets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import blocks as blk
from . import ranking
from .battery import ALPHA, Battery, diagram
from .formats import markdown_table
from .headline import RANK_HEADER, auc_text, rank_text
from .row_schema import Row


def _p(value: float) -> str:
    return f"{value:.2g}"


def class_effects(
    out: Path, found: Battery, picked: blk.Picked[Row], hypothesis: Any
) -> list[dict[str, Any]]:
    """Per adjacent pair of the hypothesis's classes (lower, higher): the random-effects pooled paired
    DeLong difference ``mean AUC(higher) - mean AUC(lower)`` over the battery's blocks, Holm over pairs.

    The intervals are Bonferroni-adjusted (level 1 - α / m over the m pairs), so that they agree with the
    Holm p-values printed beside them: an interval that excludes 0 implies a Holm rejection (Holm rejects
    at least what Bonferroni does); a Holm rejection with an interval that holds 0 can still happen."""
    from statsmodels.stats.multitest import multipletests

    order, classes = hypothesis.order, {n: c for n, c in hypothesis.classes.items() if n in found.names}
    pooled_pairs = []
    for low, high in zip(order, order[1:], strict=False):
        if not {low, high} <= set(classes.values()):
            continue  # a class with no ranked technique: nothing to compare (the Page line says why)
        per_block, skipped = [], 0
        for block in found.blocks:
            here = picked.get(block, {})
            seeds = [
                s for s in here.get(found.names[0], {}) if all(s in here.get(n, {}) for n in found.names)
            ]
            runs = [
                blk.contrast(
                    out,
                    [picked[block][n][s] for n in found.names if classes.get(n) == high],
                    [picked[block][n][s] for n in found.names if classes.get(n) == low],
                )
                for s in seeds
            ]
            read = [r for r in runs if r is not None]
            if not runs or len(read) < len(runs) or any(variance <= 0 for _, variance in read):
                skipped += 1
                continue
            per_block.append((np.mean([r[0] for r in read]), sum(r[1] for r in read) / len(read) ** 2))
        if per_block:
            pooled_pairs.append((low, high, skipped, per_block))
    level = 1 - ALPHA / max(1, len(pooled_pairs))  # Bonferroni over the pairs
    effects = [
        {"low": low, "high": high, "skipped": skipped, "pairs": len(pooled_pairs)}
        | ranking.random_effects([e for e, _ in per_block], [v for _, v in per_block], level=level)
        for low, high, skipped, per_block in pooled_pairs
    ]
    if effects:
        _, adjusted, _, _ = multipletests([e["p_value"] for e in effects], alpha=ALPHA, method="holm")
        for effect, p in zip(effects, adjusted, strict=True):
            effect["p_holm"] = float(p)
    return effects


def answer(out: Path, found: Battery | None, context: dict[str, Any]) -> list[str]:
    """The Answer section. ``context``: attack, view, seeds (per block), fractions, hypothesis,
    registration, page (the hypothesis's own battery when its attack or view differ), picked rows."""
    attack, view = context["attack"], context["view"]
    lines = ["## Answer", ""]
    if found is None:
        return [
            *lines,
            f"No two techniques share a (model, dataset) block under `{attack}`: nothing to rank.",
            "",
        ]
    n = len(found.blocks)
    low, high = min(context["seeds"]), max(context["seeds"])
    seeds = f"{low} seed{'s' if high > 1 else ''}" if low == high else f"{low}-{high} seeds"
    where = "each cell's last checkpoint" if view == "last" else "each cell's best-validation checkpoint"
    lines += [
        f"Which techniques leak more under `{attack}`, at {where}: {n} complete (model, dataset) blocks, "
        f"{seeds} each, averaged within a block; {len(found.names)} techniques ranked (`none`, the un-adapted "
        "base, is a control: see Controls).",
        *_several(context.get("several", {})),
        "",
        *_ranking_table(found, context),
        "",
    ]
    verdicts: dict[str, list[str]] = {"established": [], "suggested": [], "not": []}
    lines += _omnibus(found, verdicts) + _pairs(out, found, attack, view, verdicts)
    hypothesis = context.get("hypothesis")
    if hypothesis is not None:
        lines += _confirmatory(context, verdicts) + _effects(
            out, found, context["picked"], hypothesis, verdicts
        )
    for name, p in sorted(found.partial.items()):
        lines.append(
            f"- **Partial**: `{name}` is in {p['blocks']} of the blocks; there it ranks {p['mean_rank']:.1f} of "
            f"{p['k']} on average (mean AUC {p['mean_auc']:.3f}); no test over so few blocks."
        )
    suggested = (
        f"Suggested, not established: {'; '.join(verdicts['suggested'])}. " if verdicts["suggested"] else ""
    )
    lines += [
        "- **In plain words.** Established (α = 0.05, blocks as units): "
        f"{'; '.join(verdicts['established']) or 'nothing'}. {suggested}"
        f"Not established: {'; '.join(verdicts['not']) or '-'}.",
        "- These tests treat blocks as the units, so they hold for these models and datasets only (see the "
        "Caveat); every other test on this page is exploratory.",
        "",
    ]
    return lines


def _several(several: dict[str, int]) -> list[str]:
    """A line naming techniques run under several settings in a block (a sweep changed and rerun into the
    same folder): ranked there on the mean of their settings, left out of the paired per-seed reads."""
    if not several:
        return []
    named = ", ".join(f"`{n}` ({k} block{'s' if k > 1 else ''})" for n, k in several.items())
    return [
        "",
        f"Run under more than one setting in a block: {named}; a technique's value there is the mean over "
        "its settings, and the tests that pair techniques by seed leave it out of that block.",
    ]


def _ranking_table(found: Battery, context: dict[str, Any]) -> list[str]:
    hypothesis = context.get("hypothesis")
    classes = hypothesis.classes if hypothesis else None
    header = ["rank", "technique", *(["class"] if classes else []), "trainable", "mean AUC"]
    body = []
    for i, name in enumerate(found.names, 1):
        cells = [str(i), name, *([classes.get(name, "-")] if classes else [])]
        cells += [blk.fraction_text(context["fractions"].get(name)), auc_text(found, name)]
        body.append([*cells, rank_text(found, name)])
    return markdown_table([*header, RANK_HEADER], body).split("\n")


def _omnibus(found: Battery, verdicts: dict[str, list[str]]) -> list[str]:
    if not found.friedman:
        return []
    f = found.friedman
    (verdicts["established"] if f["p_value"] <= ALPHA else verdicts["not"]).append(
        "that the techniques differ (Friedman)"
    )
    return [
        f"- **Do they differ at all?** Friedman χ²({f['df']}) = {f['statistic']:.1f}, p = {_p(f['p_value'])} "
        f"(chi-square approximation over {len(found.blocks)} blocks)."
    ]


def _pairs(out: Path, found: Battery, attack: str, view: str, verdicts: dict[str, list[str]]) -> list[str]:
    n = len(found.blocks)
    picture = f"plots/cd_{attack}_{view}.png"
    diagram(
        found, Path(out) / picture, f"{attack}, {view} checkpoint: mean rank over {n} blocks (1 = leakiest)"
    )
    pairs = found.significant
    shown = ", ".join(f"{p['a']} {'>' if p['median_difference'] > 0 else '<'} {p['b']}" for p in pairs[:4])
    shown += " …" if len(pairs) > 4 else ""
    if pairs:
        verdicts["established"].append(f"{len(pairs)} pairwise difference(s) ({shown})")
    else:
        verdicts["not"].append("any single pair of techniques (Wilcoxon–Holm)")
    return [
        f"- **Which pairs?** Wilcoxon signed-rank over the {n} blocks, Holm over all {len(found.pairs)} pairs: "
        f"{len(pairs)} significant at {ALPHA}{': ' + shown if shown else ''} (the smallest p {n} blocks allow "
        f"is {found.smallest_p:.3g}). Diagram: `{picture}` (bars join techniques no test separates; Nemenyi "
        f"CD {found.cd:.1f} ranks).",
        f"  ![critical differences]({picture})",
    ]


def _effects(
    out: Path, found: Battery, picked: blk.Picked[Row], hypothesis: Any, verdicts: dict[str, list[str]]
) -> list[str]:
    effects = class_effects(out, found, picked, hypothesis)
    if not effects:
        return []
    m = effects[0]["pairs"]
    simultaneous = (
        f"Bonferroni-adjusted {1 - ALPHA / m:.1%} CI, 95 % over the {m} pairs" if m > 1 else "95 % CI"
    )
    lines = [
        "- **How much more?** Random-effects meta-analysis over blocks of the paired DeLong difference of "
        f"class mean AUCs (Hartung–Knapp with the scale at least 1, {simultaneous}; τ²; Holm over the pairs):"
    ]
    for e in effects:
        skipped = f"; {e['skipped']} block(s) without per-sample scores" if e["skipped"] else ""
        tau = "-" if e["tau2"] is None else f"{e['tau2']:.2g}"
        interval = f"[{e['ci_low']:+.3f}, {e['ci_high']:+.3f}]"
        lines.append(
            f"  {e['high']} − {e['low']}: {e['estimate']:+.3f} {interval}, τ² = {tau}, "
            f"p (Holm) = {_p(e['p_holm'])}, {e['k']} blocks{skipped}"
        )
        if e["p_holm"] <= ALPHA:
            verdicts["established"].append(
                f"{e['high']} leaks more than {e['low']} by {e['estimate']:.3f} AUC {interval}"
            )
        else:
            verdicts["not"].append(f"a difference between {e['high']} and {e['low']}")
    return lines


def _confirmatory(context: dict[str, Any], verdicts: dict[str, list[str]]) -> list[str]:
    hypothesis, registration, page = context["hypothesis"], context["registration"], context["page"]
    order = " < ".join(hypothesis.order)
    head = (
        f"- **Confirmatory test**: the sweep's class order {order} (`{hypothesis.attack}`, "
        f"{hypothesis.checkpoint} checkpoint), Page's L"
    )
    if page is None or page.page is None:
        return [f"{head}: not run ({page.page_problem if page else 'no complete block'})."]
    result = page.page
    status = "**pre-registered**" if registration.confirmatory else "**exploratory**"
    text = f"the class order {order} (Page, p = {_p(result['p_value'])})"
    if result["p_value"] > hypothesis.alpha:  # its own level (one-sided), 0.05 unless it names one
        verdicts["not"].append(f"the class order {order} (Page)")
    elif registration.confirmatory:
        verdicts["established"].append(text)
    else:
        verdicts["suggested"].append(text + ", exploratory")
    tried = context.get("attempts", 0)
    log = f" Confirmatory attempts of this hypothesis logged in this folder: {tried} (`hypothesis_attempts.jsonl`)."
    return [
        f"{head} = {result['L']:.1f}, p = {_p(result['p_value'])} ({result['method']}, {result['n_blocks']} "
        f"blocks). {status}: {registration.reason}.{log}"
    ]
