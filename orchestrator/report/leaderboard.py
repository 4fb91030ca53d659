"""The leaderboard: one row per (cell, checkpoint, attack) from the finished cells on disk.

:func:`build` reads every ``cells/*/`` with ``DONE`` (its ``cell.json`` and each checkpoint's
``metrics.json``) and writes ``leaderboard.parquet``, ``.csv``, ``.md`` and ``.html`` atomically; it is
what ``privauditor report DIR`` runs and what a sweep calls as cells finish. Columns: the design's
contract (``cell_id, model, adaptation, dataset, seed, attack, auc, auc_ci_low, auc_ci_high,
tpr_at_0.1pct_fpr, tpr_at_1pct_fpr, n_members, n_nonmembers, utility_loss, trainable_params,
train_seconds``) and the checkpoint's ``epoch``, ``step`` and ``best`` (lowest validation NLL of its
cell; null for an audit, whose training is not known). ``utility_loss`` is the checkpoint's own.

Defences: ``defence`` (``none``, ``dp``), ``epsilon`` (the ε a DP checkpoint has spent; null without DP),
``epsilon_target`` (the cell's), ``delta``, and the attack's empirical lower bound on ε at that δ,
``eps_lower`` (null: nothing bounded), with ``eps_ceiling``, the most its sample size could show
(:mod:`privauditor.tasks.stats.lower_bound`); ``dp_violation`` is true where the bound exceeds the spent ε: a
bug in DP training or accounting. ``auc_repeated_vs_singleton``: with duplication, how the score ranks
members trained several times above those trained once.

Board: ``setting`` hashes the cell's resolved spec without its seed (cells of one setting differ only in
seed), and ``runs`` is how many runs' records a row averages (1 in a results folder; a board's cell rows,
:mod:`privauditor.orchestrator.board.merge`, have the same columns).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.infra.faults import point
from privauditor.tasks.infra.files import atomic_write
from privauditor.tasks.infra.results import Results
from privauditor.tasks.spec.resolved import spec_of

from .formats import fraction_text, markdown_table, tpr_text
from .row_schema import Row, Source, arrow_schema, columns, row, trained_rows
from .summary import APART_HEADER, SUMMARY_HEADER, apart_table, summary

#: the columns that are rates or probabilities, by prefix
RATES = ("auc", "tpr_", "extraction_", "pii_")


def rows(out: Path) -> list[Row]:
    """One row per (finished cell, checkpoint, attack), sorted by cell id, epoch, attack, then the rows of
    the last checkpoint's shipped forms (``shipped``; ``trained`` in the rest)."""
    found: list[Row] = []
    for folder in Results(out).folders():
        record = folder.record()
        spec = spec_of(record)
        for checkpoint, metrics in folder.checkpoints(shipped=True):
            for attack in sorted(metrics):
                if "auc" in metrics[attack]:
                    found.append(checked(row(Source(record, spec, checkpoint, attack, metrics[attack]))))
    return found


def checked(found: Row) -> Row:
    """The row, or a one-line error for a rate outside [0, 1] (a difference of rates: [-1, 1]). An AUC or
    a TPR of 1.7 was written by no privauditor: the file was changed after its cell finished."""
    for name, value in found.items():
        low = -1.0 if "_difference" in name else 0.0
        if name.startswith(RATES) and isinstance(value, float) and not low <= value <= 1.0:
            raise PrivauditorError(
                f"cell {found['cell_id']}: {found['attack']} {name} = {value} is outside [{low:g}, 1]: its "
                "metrics or records were changed after the cell wrote them"
            )
    return found


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    def written(tmp: Path) -> None:
        write(tmp)
        point("leaderboard")  # crash tests stop here (only when $PRIVAUDITOR_FAULT asks)

    atomic_write(path, written)


def build(out: Path, found: list[Row] | None = None) -> list[Row]:
    """Rebuild every leaderboard file under ``out`` from the finished cells (or from their rows ``found``,
    where the caller has read them already); returns the rows."""
    found = rows(Path(out)) if found is None else found
    write(Path(out), found)
    return found


def write(out: Path, found: Sequence[Mapping[str, Any]]) -> None:
    """``leaderboard.parquet/.csv/.md/.html`` of the rows ``found`` under ``out`` (ROC images from
    ``out/plots/``), each file written atomically. Rows of a results folder (:func:`rows`) or the board's
    cell rows (:mod:`privauditor.orchestrator.board.merge`: these merged, with columns of their own), so
    any mapping of the leaderboard's columns."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    schema = arrow_schema(columns())
    table = pa.Table.from_pylist(found, schema=schema) if found else schema.empty_table()
    _atomic(out / "leaderboard.parquet", lambda p: pq.write_table(table, p))
    _atomic(out / "leaderboard.csv", lambda p: pacsv.write_csv(table, p))
    every, found = len(found), trained_rows(found)  # the shipped forms' rows: in the files above only
    shipped = every - len(found)
    header = ["model", "adaptation", "dataset", "seed", "epoch", "best", "attack", "access", "AUC", "95% CI",
              "TPR@1%FPR [95% CI]", "TPR at 0 FP of N", "trainable", "val NLL"]  # fmt: skip
    body = [
        [
            r["model"],
            r["adaptation"],
            r["dataset"],
            r["seed"],
            "-" if r["epoch"] is None else r["epoch"],
            "-" if r["best"] is None else r["best"],
            r["attack"],
            r["access"],
            f"{r['auc']:.3f}",
            f"[{r['auc_ci_low']:.3f}, {r['auc_ci_high']:.3f}]",
            tpr_text(r, "tpr_at_1pct_fpr"),
            tpr_text(r, "tpr_at_0fp"),
            fraction_text(r["trainable_fraction"]),
            f"{r['utility_loss']:.3f}",
        ]
        for r in sorted(found, key=lambda r: -r["auc"])
    ]
    left_out = apart_table(found)  # attacks without a row in some cells: means compare the same cells
    apart_lines = (
        [
            "Attacks without a row in some cells (they abstained on every text there, or were skipped), "
            "apart: their means are over fewer cells and left out of both tables above:",
            "",
            markdown_table(APART_HEADER, left_out),
            "",
        ]
        if left_out
        else []
    )
    markdown = [
        "# Leaderboard",
        "",
        "Mean ± std AUC per adaptation at each cell's last checkpoint (across models, datasets, seeds and "
        "the attacks with a row in every cell; `findings.md` compares techniques at equal epochs, best "
        "validation and matched utility):",
        "",
        markdown_table(["adaptation", *SUMMARY_HEADER], summary(found, "adaptation")),
        "",
        "Mean ± std AUC per attack, every one over the same cells (those where each has a row):",
        "",
        markdown_table(["attack", *SUMMARY_HEADER], summary(found, "attack")),
        "",
        *apart_lines,
        "Every (cell, checkpoint, attack), highest AUC first:",
        "",
        markdown_table(header, body),
        "",
        *(
            [
                f"The {shipped} rows of shipped forms (column `shipped`) are in `leaderboard.parquet` and `.csv`; "
                "`findings.md` compares them with the models as trained (*As shipped*).",
                "",
            ]
            if shipped
            else []
        ),
    ]
    _atomic(out / "leaderboard.md", lambda p: p.write_text("\n".join(markdown)))
    write_html(out, found)


def write_html(out: Path, found: Sequence[Mapping[str, Any]]) -> None:
    """``leaderboard.html`` (ROC and privacy–utility images from ``out/plots/``), atomically."""
    from .html import leaderboard_html

    _atomic(out / "leaderboard.html", lambda p: p.write_text(leaderboard_html(out, found)))
