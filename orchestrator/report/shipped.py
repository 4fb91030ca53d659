"""``findings.md``'s *As shipped*: each shipped form of a cell's last checkpoint (``score.shipped``:
tasks/shipping) against the model as trained, on the same records.

Per technique and form: the cells, the trained model's mean AUC, the mean change of the AUC and of the TPR
at 1 % FPR with their 95 % paired bootstrap intervals (:mod:`privauditor.tasks.stats.paired`: each cell's
records resampled once for both models; the mean over cells from independent resamples of each), and the
mean change of the validation NLL, of the greedy extraction gap (members' rate less non-members') and of
the canaries' exposure, with how many cells each moved in. Then the change of the AUC of every attack,
per form, and the forms that were not audited, with why.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.results import Results

from .formats import markdown_table
from .row_schema import TRAINED, shipped_form
from .summary import technique

#: paired resamples per cell (the percentile interval's tails need about 1,000: Efron & Tibshirani 1993)
RESAMPLES = 1000
LEVEL = 0.95


def shipped_section(out: Path, rows: Sequence[Mapping[str, Any]], attack: str) -> list[str]:
    """The section's lines (none where no cell audited a shipped form)."""
    pairs = _pairs(rows)
    if not pairs:
        return []
    draws = _Draws(Results(out), attack)
    lines = [
        "## As shipped",
        "",
        f"The last checkpoint of each cell with `score.shipped`, attacked as it ships beside the model as "
        f"trained, on the same records (`{attack}`). Δ is shipped less trained; each interval is a "
        f"{LEVEL:.0%} paired bootstrap over the records ({RESAMPLES} resamples per cell, members and "
        "non-members apart, the same draws for both models; a mean over cells resamples each on its own): "
        "it covers the records' sampling for these trained models, not other training seeds or bases. "
        "An interval that excludes 0 is a change the records show. Extraction is the greedy gap (members' "
        "rate less non-members'), exposure the included canaries' mean at the most repeats (bits); "
        "`moved` counts the cells whose value changed.",
        "",
    ]
    lines += _primary(draws, pairs, attack)
    lines += _every_attack(draws, pairs)
    lines += _skipped(draws.results, sorted({r["cell_id"] for r in rows}))
    return lines


def _pairs(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[tuple[Mapping, Mapping]]]:
    """(technique, form) -> (trained row, shipped row) of one cell and attack, at the last checkpoint."""
    trained = {(r["cell_id"], r["step"], r["attack"]): r for r in rows if shipped_form(r) == TRAINED}
    found: dict[tuple[str, str], list[tuple[Mapping, Mapping]]] = defaultdict(list)
    for r in rows:
        if shipped_form(r) == TRAINED:
            continue
        before = trained.get((r["cell_id"], r["step"], r["attack"]))
        if before is not None:
            found[(technique(r), r["shipped"])].append((before, r))
    return dict(sorted(found.items()))


def _scores(results: Results, cell_id: str, form: str, attack: str) -> tuple[np.ndarray, np.ndarray]:
    """(member, scores) of ``attack`` in the cell's last checkpoint (``trained``) or a shipped form, by
    sample id."""
    from privauditor.tasks.cell.evaluate import read_scores

    return read_scores(results.cell(cell_id).path / ("." if form == TRAINED else f"shipped/{form}"), attack)


class _Draws:
    """Each (cell, attack, form)'s paired resamples of the change from the trained model to the shipped
    one, drawn once (the TPR's too for the section's ``attack``) and read by both tables."""

    def __init__(self, results: Results, attack: str) -> None:
        self.results, self.attack = results, attack
        self.found: dict[tuple[str, str, str], dict[str, np.ndarray]] = {}

    def __call__(self, before: Mapping, after: Mapping) -> dict[str, np.ndarray]:
        from privauditor.tasks.stats.paired import paired_differences

        cell_id, attack, form = before["cell_id"], before["attack"], after["shipped"]
        if (cell_id, attack, form) not in self.found:
            member, trained = _scores(self.results, cell_id, TRAINED, attack)
            same, shipped = _scores(self.results, cell_id, form, attack)
            if not np.array_equal(member, same):
                raise PrivauditorError(f"{cell_id}: its shipped form {form} scored other records than it did")
            seed = zlib.crc32(f"{cell_id}/{attack}/{form}".encode())  # independent across cells
            target = 0.01 if attack == self.attack else None
            self.found[(cell_id, attack, form)] = paired_differences(
                member, trained, shipped, RESAMPLES, seed, target
            )
        return self.found[(cell_id, attack, form)]


def _change(pairs: Sequence[tuple[Mapping, Mapping]], column: str) -> str:
    """The mean change of a cell-level ``column`` and how many cells it moved in (``-`` without values)."""
    found = [
        (a[column], b[column]) for a, b in pairs if a.get(column) is not None and b.get(column) is not None
    ]
    if not found:
        return "-"
    moved = sum(x != y for x, y in found)
    return f"{np.mean([y - x for x, y in found]):+.3f} (moved {moved}/{len(found)})"


def _interval(point: float, draws: Sequence[np.ndarray]) -> str:
    from privauditor.tasks.stats.paired import mean_interval

    low, high = mean_interval(draws, LEVEL)
    mark = " *" if low > 0 or high < 0 else ""
    return f"{point:+.3f} [{low:+.3f}, {high:+.3f}]{mark}"


def _primary(drawn: _Draws, pairs: dict, attack: str) -> list[str]:
    """The table of ``attack``: per technique and form, the AUC and TPR changes and the cell-level ones."""
    body = []
    for (name, form), found in pairs.items():
        chosen = [(a, b) for a, b in found if a["attack"] == attack]
        if not chosen:
            continue
        draws = [drawn(a, b) for a, b in chosen]
        auc = _interval(float(np.mean([b["auc"] - a["auc"] for a, b in chosen])), [d["auc"] for d in draws])
        rated = [(a, b, d) for (a, b), d in zip(chosen, draws, strict=True) if "tpr" in d]
        tpr = "-"
        if rated:
            point = float(np.mean([b["tpr_at_1pct_fpr"] - a["tpr_at_1pct_fpr"] for a, b, _ in rated]))
            tpr = _interval(point, [d["tpr"] for _, _, d in rated])
        trained_auc = np.mean([a["auc"] for a, _ in chosen])
        body.append([name, form, len(chosen), f"{trained_auc:.3f}", auc, tpr, _change(chosen, "utility_loss"),
                     _change(chosen, "extraction_greedy_difference"), _change(chosen, "exposure_top")])  # fmt: skip
    if not body:
        return [f"No cell audited a shipped form with `{attack}`.", ""]
    header = ["technique", "form", "cells", "AUC trained", "Δ AUC [95% CI]", "Δ TPR@1%FPR [95% CI]",
              "Δ val NLL", "Δ extraction gap", "Δ exposure"]  # fmt: skip
    return [markdown_table(header, body), "", "`*`: the interval excludes 0.", ""]


def _every_attack(drawn: _Draws, pairs: dict) -> list[str]:
    """Per form and attack over every technique's cells: the mean AUC change with its paired interval."""
    by: dict[tuple[str, str], list[tuple[Mapping, Mapping]]] = defaultdict(list)
    for (_, form), found in pairs.items():
        for a, b in found:
            by[(form, a["attack"])].append((a, b))
    body = []
    for (form, attack), found in sorted(by.items()):
        draws = [drawn(a, b)["auc"] for a, b in found]
        point = float(np.mean([b["auc"] - a["auc"] for a, b in found]))
        body.append([form, attack, len(found), _interval(point, draws)])
    return [
        "### Every attack, every technique's cells",
        "",
        markdown_table(["form", "attack", "cells", "Δ AUC [95% CI]"], body),
        "",
    ]


def _skipped(results: Results, cells: Sequence[str]) -> list[str]:
    """The forms a cell did not audit, with why (from ``cell.json``'s ``shipped``), counted by reason."""
    reasons: dict[tuple[str, str], int] = defaultdict(int)
    for cell_id in cells:
        for entry in results.cell(cell_id).record().get("shipped", []):
            if "skipped" in entry:
                reasons[(entry["shipped"], entry["skipped"])] += 1
    if not reasons:
        return []
    lines = ["Not audited (form: why, cells):", ""]
    return lines + [f"- `{form}`: {why} ({n})" for (form, why), n in sorted(reasons.items())] + [""]
