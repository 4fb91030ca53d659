"""What the API returns: an audit's result and a results folder's rows, read from the files on disk."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tasks.infra.results import CellFolder
from .tasks.infra.results import Results as _Folder

#: an audit's cell id starts with this (``tasks/audit/run.py``)
AUDIT_PREFIX = "audit__"


@dataclass
class AuditResult:
    """One audit: its record (``cell.json``), its attacks' metrics and its verdict (``verdict.json``)."""

    path: Path
    record: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    verdict: dict[str, Any]
    skipped: bool = False  # found done, not run by this call

    @classmethod
    def read(cls, path: Path, skipped: bool = False) -> AuditResult:
        """The finished audit in ``path`` (a folder ``OUT/cells/<audit id>``)."""
        from .tasks.audit.verdict import verdict

        path = Path(path).resolve()  # still right after a change of working directory
        cell = CellFolder.at(path)
        if not cell.done:
            raise FileNotFoundError(f"{path}: not a finished audit (no DONE)")
        found = path / "verdict.json"
        judged = json.loads(found.read_text()) if found.exists() else verdict(path, write=False)
        return cls(path, cell.record(), cell.metrics(), judged, skipped)

    @property
    def cell_id(self) -> str:
        return self.record["cell_id"]

    def __repr__(self) -> str:  # the metrics hold ROC curves: a notebook shows this line instead
        return (
            f"AuditResult(cell_id={self.cell_id!r}, finding={self.finding!r}, attacks={len(self.metrics)}, "
            f"path={str(self.path)!r})"
        )

    @property
    def finding(self) -> str:
        """``shift`` (the files differ: no leakage verdict), ``reversed`` (members score significantly
        lower: files swapped, or a shift; no leakage verdict), ``leakage`` or ``nothing detected``."""
        shift = self.verdict["shift"]
        if shift and shift["detected"]:
            return "shift"
        if self.verdict.get("reversed"):  # absent from a verdict written before the lower tail was tested
            return "reversed"
        return "leakage" if self.verdict["leakage"] else "nothing detected"

    @property
    def conclusion(self) -> list[str]:
        return list(self.verdict["conclusion"])

    @property
    def warnings(self) -> list[str]:
        return list(self.record["audit"]["warnings"])

    def to_pandas(self):
        """One row per attack: threat model, AUC with its bootstrap interval, TPR at 0.1 % and 1 % FPR
        (None below 1,000 and 100 non-members), the TPR at 0 false positives with its 95 % interval and
        the FPR that 0 false positives of the non-members bound (``tpr_at_0fp_fpr_bound``: what the rate
        is read at when a fixed FPR cannot be), and the verdict's one-sided p-value with Holm's adjustment
        (controls have none). Columns under the leaderboard's names."""
        import pandas as pd

        from .orchestrator.report.row_schema import access_of, tpr_fields

        zero = ("tpr_at_0fp", "tpr_at_0fp_ci_low", "tpr_at_0fp_ci_high", "tpr_at_0fp_fpr_bound")

        tests = self.verdict["attacks"]
        rows = []
        for attack, m in sorted(self.metrics.items()):
            if "auc" not in m:  # skipped, with its reason in the metrics
                continue
            low, high = m.get("auc_ci", [None, None])
            rows.append(
                {
                    "attack": attack,
                    "access": access_of(attack),
                    "auc": m["auc"],
                    "auc_ci_low": low,  # the leaderboard's names
                    "auc_ci_high": high,
                    "tpr_at_0.1pct_fpr": m.get("tpr_at_0.1pct_fpr"),
                    "tpr_at_1pct_fpr": m.get("tpr_at_1pct_fpr"),
                    **{name: tpr_fields(m)[name] for name in zero},
                    "p": tests.get(attack, {}).get("p"),
                    "p_holm": tests.get(attack, {}).get("p_holm"),
                }
            )
        return pd.DataFrame(rows)

    def report(self, to: str | Path | None = None, pdf: bool = True) -> list[Path]:
        """Write the audit's report (``OUT/reports/<audit id>.html``, and ``.pdf`` when ``pdf`` and a
        Chromium is found) and return the paths written."""
        from .orchestrator.report.audit_report import write_report

        folder = Path(to) if to is not None else CellFolder.at(self.path).out / "reports"
        return write_report(self, folder, pdf)


class Results(_Folder):
    """A results folder as the API reads it: the results store
    (:class:`privauditor.tasks.infra.results.Results`, which alone knows the layout) with its rows, one per
    (finished cell, checkpoint, attack) as the leaderboard has them."""

    def __init__(self, path: Path, rows: list[dict[str, Any]], exit_code: int | None = None) -> None:
        super().__init__(path)
        self.rows = rows
        self.exit_code = exit_code  # set by ``run``: the CLI's exit code

    @classmethod
    def read(cls, path: Path) -> Results:
        from .orchestrator.report.leaderboard import rows

        if not _Folder(path).cells_dir.is_dir():
            raise FileNotFoundError(f"{path} is not a results folder (no cells/ inside)")
        path = Path(path).resolve()
        return cls(path, rows(path))

    @property
    def path(self) -> Path:
        return self.root

    def __eq__(self, other: object) -> bool:  # the same folder read to the same rows (the exit code aside)
        return isinstance(other, Results) and (self.path, self.rows) == (other.path, other.rows)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaces

    def __repr__(self) -> str:
        return f"Results(path={str(self.path)!r}, rows={len(self.rows)})"

    @property
    def cells(self) -> list[str]:
        """The finished cells' ids, sorted."""
        return sorted({r["cell_id"] for r in self.rows})

    @property
    def audits(self) -> list[AuditResult]:
        """The folder's finished audits."""
        return [AuditResult.read(self.cell(c).path) for c in self.cells if c.startswith(AUDIT_PREFIX)]

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.rows)
