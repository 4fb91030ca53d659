"""``findings.md``'s extraction section: how much of the training records a technique gives back.

Per technique, from each undefended cell's checkpoints (the ``extraction_*`` columns: rates of records
whose suffix greedy decoding gives back, and whose suffix top-k sampling gives back within n samples
with probability p; privauditor.tasks.leakage.extraction), the members' rate less the non-members': what
training added to what the base already predicts. At the last checkpoint: the mean over cells with a
95 % t-interval over cells (scipy); at every epoch: the mean difference. Then how the techniques' order
by that difference relates to their order by the attack's AUC (Spearman's ρ, scipy).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import blocks as blk
from .formats import epoch_table, markdown_table
from .formats import number as _fmt
from .row_schema import Row

#: column prefix -> label: the two kinds of discoverable extraction, then the PII fields' reconstruction
KINDS = {"extraction_greedy": "greedy", "extraction_sampled": "(n, p)", "pii_reconstructed": "PII fields",
         "pii_inferred": "PII inferred"}  # fmt: skip


def _rate(row: Mapping[str, Any], column: str) -> float | None:
    """A row's extraction column named from :data:`KINDS` (``<kind>_members``, ``_nonmembers``,
    ``_difference``): a name built at run time, so the row is read as a mapping."""
    return row.get(column)


def _mean(given: Sequence[float | None]) -> str:
    values = [v for v in given if v is not None]
    return _fmt(float(np.mean(values))) if values else "-"


def mean_interval(given: Sequence[float | None]) -> str:
    """``mean [low, high]``: a 95 % t-interval over the values (the mean alone below two)."""
    from scipy import stats

    values = [v for v in given if v is not None]
    if not values:
        return "-"
    mean = float(np.mean(values))
    if len(values) < 2 or np.std(values) == 0:
        return _fmt(mean) + ("" if len(values) < 2 else f" [{_fmt(mean)}, {_fmt(mean)}]")
    low, high = stats.t.interval(0.95, len(values) - 1, loc=mean, scale=stats.sem(values))
    return f"{_fmt(mean)} [{_fmt(low)}, {_fmt(high)}]"


def extraction_section(rows: list[Row], attack: str) -> list[str]:
    """The section's lines; none where no row carries extraction rates (results that predate them)."""
    found = blk.trajectories(rows, attack)
    last: dict[str, list[Row]] = defaultdict(list)
    points_of: dict[str, list[Row]] = defaultdict(list)
    for techniques in found.values():
        for name, seeds in techniques.items():
            for points in seeds.values():
                points = [r for r in points if r.get("extraction_greedy_difference") is not None]
                if points:
                    last[name].append(points[-1])
                points_of[name] += points
    if not last:
        return []
    kinds = {
        k: v
        for k, v in KINDS.items()
        if any(_rate(r, f"{k}_difference") is not None for c in last.values() for r in c)
    }
    head = ["technique", "cells"]
    for label in kinds.values():
        head += [f"{label} members", f"{label} non-members", f"{label} difference [95 % CI]"]
    body = []
    for name in sorted(last):
        cells = last[name]
        line = [name, str(len(cells))]
        for kind in kinds:
            line += [_mean([_rate(r, f"{kind}_{side}") for r in cells]) for side in ("members", "nonmembers")]
            line.append(mean_interval([_rate(r, f"{kind}_difference") for r in cells]))
        body.append(line)
    lines = [
        "## Extraction",
        "",
        "Discoverable extraction of each scored record: the prompt and its first target tokens as the prefix,",
        "the next tokens as the suffix (`extraction.json` in each checkpoint's folder has the settings and",
        "counts). *Greedy*: greedy decoding gives the suffix back. *(n, p)*: top-k sampling at temperature 1",
        "gives it back at least once in n samples with probability p. Rates over the records long enough to",
        "split. *PII fields*: the dataset's declared fields (names, companies, accounts, amounts, dates)",
        "whose every token the model ranks first given the text before them, over fields. The difference",
        "(members less non-members) is what training added."
        + (
            " *PII inferred* (`score.pii_candidates`, last checkpoint only): the true value of a hidden field"
            " scores above every decoy of its kind (Lukas et al. 2023; chance 1 / candidates), decoys drawn from"
            " the values of records never trained on (non-members', population's), one pool for members and"
            " non-members (a cell whose config has no `pii_inference_version` drew them from every scored"
            " record, members' included)."
            if "pii_inferred" in kinds
            else ""
        )
        + " At each cell's last checkpoint, the mean over cells with a 95 % t-interval over cells:",
        "",
        markdown_table(head, body),
        "",
    ]
    return lines + _trajectories(points_of) + _against_auc(last, attack)


def _trajectories(points_of: dict[str, list[Row]]) -> list[str]:
    """Per kind whose difference is not 0 everywhere, its mean at each checkpoint by technique."""
    lines = []
    for kind, label in KINDS.items():
        by_epoch: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
        for name, points in points_of.items():
            for r in points:
                if (difference := _rate(r, f"{kind}_difference")) is not None:
                    by_epoch[name][blk.measured(r, "epoch")].append(difference)
        if any(v for by in by_epoch.values() for values in by.values() for v in values):
            lines += [f"Mean {label} difference at each checkpoint:", "", epoch_table(by_epoch), ""]
    return lines


def _against_auc(last: dict[str, list[Row]], attack: str) -> list[str]:
    """Per kind, Spearman's ρ between the techniques' mean difference and their mean AUC of ``attack``."""
    from scipy import stats

    names = sorted(last)
    if len(names) < 3:
        return []
    auc = [np.mean([blk.measured(r, "auc") for r in last[n]]) for n in names]
    lines = []
    for kind, label in KINDS.items():
        means = [
            [value for r in last[n] if (value := _rate(r, f"{kind}_difference")) is not None] for n in names
        ]
        if not all(means):
            continue
        difference = [np.mean(m) for m in means]
        if np.ptp(difference) == 0 or np.ptp(auc) == 0:
            lines.append(f"- {label}: no order to compare (constant over the techniques).")
            continue
        rho, p = stats.spearmanr(difference, auc)
        lines.append(f"- {label}: Spearman's ρ over the {len(names)} techniques {rho:.2f} (p {p:.3g})")
    if not lines:
        return []
    return [f"Against `{attack}`'s AUC at the same checkpoints (exploratory):", "", *lines, ""]
