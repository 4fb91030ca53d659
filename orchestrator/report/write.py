"""A results folder's report files, written from its finished cells: the leaderboard (rebuilt from the
cells' summaries), ``findings.md`` and the privacy-utility plots. ``privauditor run`` writes them at the
end of a sweep and ``privauditor report`` again on demand; both call these."""

from __future__ import annotations

from typing import Any

from privauditor.orchestrator.store.storage import Results
from privauditor.tasks.infra.files import write_text


def leaderboard(results: Results, found: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rebuild the leaderboard from the finished cells (fetched from an object store first), or from
    their rows ``found`` where the caller has read them already."""
    from .leaderboard import build

    if found is None:
        results.pull_summaries()
    found = build(results.local, found)
    results.push_leaderboard()
    return found


def write_findings(
    results: Results, found: list[dict[str, Any]], attack: str = "loss", other: tuple | None = None
) -> str:
    """``findings.md`` and the privacy–utility plots from the leaderboard rows ``found`` (``other``: a
    (name, rows) pair of another folder to rank against); returns the text."""
    from privauditor.orchestrator.sweepfile.hypothesis import ATTEMPTS

    from .findings import findings
    from .leaderboard import write_html
    from .plots import privacy_utility_pngs

    results.fetch(ATTEMPTS)  # the confirmatory attempts logged so far (an object store's copy)
    text = findings(results.local, found, attack, other)
    write_text(results.local / "findings.md", text)
    results.upload("findings.md")
    if (results.local / ATTEMPTS).exists():
        results.upload(ATTEMPTS)
    for path in privacy_utility_pngs(found, attack, results.local / "plots" / "privacy_utility"):
        results.upload(path.relative_to(results.local).as_posix())
    write_html(results.local, found)  # now with the plots
    results.upload("leaderboard.html")
    return text


def answer_section(findings_md: str) -> str:
    """The Answer of ``findings.md`` (its first section), as the end of a run prints it."""
    sections = findings_md.split("\n## ")
    return "## " + sections[1].strip() if len(sections) > 1 else findings_md.strip()
