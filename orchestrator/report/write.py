"""A results folder's report files, written from its finished cells: the leaderboard (rebuilt from the
cells' summaries), ``findings.md`` and the privacy-utility plots. ``privauditor run`` writes them at the
end of a sweep and ``privauditor report`` again on demand; both call these."""

from __future__ import annotations

from typing import TYPE_CHECKING

from privauditor.tasks.infra.files import write_text
from privauditor.tasks.infra.results import Results

if TYPE_CHECKING:
    from .row_schema import Row


def leaderboard(results: Results, found: list[Row] | None = None) -> list[Row]:
    """Rebuild the leaderboard from the finished cells (fetched from an object store first), or from
    their rows ``found`` where the caller has read them already."""
    from .leaderboard import build

    if found is None:
        results.pull_summaries()
    built = build(results.root, found)
    results.push_leaderboard()
    return built


def write_findings(
    results: Results, found: list[Row], attack: str = "loss", other: tuple[str, list[Row]] | None = None
) -> str:
    """``findings.md`` and the privacy–utility plots from the leaderboard rows ``found`` (``other``: a
    (name, rows) pair of another folder to rank against); returns the text."""
    from privauditor.orchestrator.sweepfile.attempts import ATTEMPTS

    from .findings import findings
    from .leaderboard import write_html
    from .plots import privacy_utility_pngs
    from .row_schema import trained_rows

    results.fetch(ATTEMPTS)  # the confirmatory attempts logged so far (an object store's copy)
    text = findings(results.root, found, attack, other)
    write_text(results.root / "findings.md", text)
    results.upload("findings.md")
    if (results.root / ATTEMPTS).exists():
        results.upload(ATTEMPTS)
    curves = privacy_utility_pngs(trained_rows(found), attack, results.root / "plots" / "privacy_utility")
    for path in curves:
        results.upload(path.relative_to(results.root).as_posix())
    write_html(results.root, found)  # now with the plots
    results.upload("leaderboard.html")
    return text


def named_section(findings_md: str, title: str) -> str:
    """The section of ``findings.md`` headed ``## <title>`` ("" without one)."""
    found = [part for part in findings_md.split("\n## ") if part.startswith(title + "\n")]
    return "## " + found[0].strip() if found else ""


def answer_section(findings_md: str) -> str:
    """The Answer of ``findings.md`` (its first section), as the end of a run prints it."""
    sections = findings_md.split("\n## ")
    return "## " + sections[1].strip() if len(sections) > 1 else findings_md.strip()
