"""A model-card section a user can paste: ``eval_results/<cell_id>.model-card.md``, beside the Hub files of
one cell (one adapted model) at its last checkpoint.

The section: the heading :data:`HEADING`; a paragraph saying what was measured (the base, the technique,
the dataset, how many members and non-members, the checkpoint, privauditor's version, and for a board's
cell how many replicas its numbers are the mean of); a table per attack (access, AUC with its 95 %
interval, TPR at 1 % and at 0.1 % FPR); a line on how to read it; and the ``model-index`` block
(:func:`.exports.model_index`, the same text as ``<cell_id>.model-index.yaml``) to merge into the card's
YAML front matter. Every number in the table is one of :func:`.exports.values`, the rounded values the
``model-index`` block holds, so the two cannot disagree; a value the block leaves out is ``n/a``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .exports import checkpoint, dataset_of, replicas, values
from .formats import markdown_table
from .summary import technique

HEADING = "## Privacy audit (privauditor)"
#: the table's columns after attack and access: (header, the column of :data:`.exports.METRICS`)
TPR_HEADERS = (("TPR@1% FPR", "tpr_at_1pct_fpr"), ("TPR@0.1% FPR", "tpr_at_0.1pct_fpr"))
READING = (
    "How to read it: an AUC of 0.5 means the attack tells members from non-members no better than chance "
    "(no measurable leakage); the higher, the more the model gives away about which records it was trained "
    "on. TPR@x% FPR is the share of members an attack finds while wrongly flagging x% of the non-members."
)


def section(rows: Sequence[Mapping[str, Any]], v: str, index: str) -> str:
    """The Markdown section of one cell's last-checkpoint rows (by attack); ``index``: its ``model-index``
    block as YAML text."""
    header = ["attack", "access", "AUC [95% CI]", *(name for name, _ in TPR_HEADERS)]
    lines = [HEADING, "", measured(rows, v), "", markdown_table(header, [cells(row) for row in rows])]
    lines += ["", READING, "", "To show these results on the model page, merge this block into the YAML "
              "front matter at the top of the model card (beside any `model-index` already there):", "",
              "```yaml", index.rstrip("\n"), "```", ""]  # fmt: skip
    return "\n".join(lines)


def measured(rows: Sequence[Mapping[str, Any]], v: str) -> str:
    """The paragraph: what was adapted, on what, against which records, at which checkpoint; for a board's
    cell, how many replicas its numbers are the mean of and whether any attack's AUCs differ among them."""
    row = rows[0]
    defence = "" if (row.get("defence") or "none") == "none" else f", defended by `{row['defence']}`"
    if defence and row.get("epsilon") is not None:
        defence += f" (ε = {row['epsilon']:g})"
    text = (
        f"privauditor {v} ran membership-inference attacks on `{row['model']}` adapted with "
        f"`{technique(row)}` on the dataset `{dataset_of(row)[1]}` (seed {row['seed']}{defence}; cell "
        f"`{row['cell_id']}`), at {checkpoint(row)}: each attack scores the {int(row['n_members'])} records "
        f"the model was trained on (members) and {int(row['n_nonmembers'])} held-out records (non-members) "
        "and tries to tell them apart."
    )
    merged = [found for r in rows if (found := replicas(r))]
    if merged:
        text += (
            f" Each number is the mean of {max(m['replicas'] for m in merged)} runs of this cell (replicas)"
        )
        differ = [r["attack"] for r in rows if not replicas(r).get("replicas_agree", True)]
        text += (
            f"; their AUCs differ ({', '.join(differ)}), and each interval is one run's." if differ else "."
        )
    return text


def cells(row: Mapping[str, Any]) -> list[str]:
    """One attack's table cells: its numbers exactly as the ``model-index`` block rounds them."""
    found = values(row)
    auc = _text(found.get("auc"))
    if "auc" in found and "auc_ci_low" in found and "auc_ci_high" in found:
        auc += f" [{found['auc_ci_low']:.4f}, {found['auc_ci_high']:.4f}]"
    return [row["attack"], str(row.get("access", "?")), auc, *(_text(found.get(c)) for _, c in TPR_HEADERS)]


def _text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
