"""``privauditor run``: a sweep's cells as Ray Tune trials, finished cells skipped, a leaderboard at the end.

The sweep's cells are resolved first (their ids hash the data and the weights, so offline models that
are missing are built before anything else: ``bases.py``); cells whose folder has ``DONE`` are not
scheduled at all, so a rerun after a crash, or after adding cells to the sweep, runs only what is
missing. The rest run as Ray Tune trials (``trials.py``); work cells share is done once, under file
locks, by the first cell that needs it (shared views, neighbour texts in ``OUT/shared/``). The
leaderboard is rebuilt as trials finish and when the sweep ends. ``OUT`` may be an object-store URI
(``storage.py``). Ctrl-C stops the running cells (marked ``INTERRUPTED``) and keeps what finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privauditor.tasks.files import write_json, write_text
from privauditor.tasks.results import check_results_dir

from .storage import Results
from .sweep import Sweep


def pending(specs: list[Any], results: Results) -> list[Any]:
    """The resolved cells without ``DONE`` in ``results``."""
    return [s for s in specs if not results.done(s.cell_id())]


def leaderboard(results: Results, found: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rebuild the leaderboard from the finished cells (fetched from an object store first), or from
    their rows ``found`` where the caller has read them already."""
    from ..report.leaderboard import build

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
    from ..report.findings import findings
    from ..report.hypothesis import ATTEMPTS
    from ..report.leaderboard import write_html
    from ..report.plots import privacy_utility_pngs

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


def run_sweep(
    sweep: Sweep,
    out: str | Path,
    address: str | None = None,
    max_concurrent: int | None = None,
    verbose: bool = False,
) -> int:
    """Run every cell of ``sweep`` that is not DONE in ``out`` (a folder or an object-store URI);
    returns the exit code."""
    import contextlib

    import yaml

    from . import bases
    from .trials import check_placeable, ray_session, run_trials

    results = Results.at(out)
    results.fetch("privauditor.json")  # an object store's marker decides, as a folder's does
    check_results_dir(results.local)
    results.upload("privauditor.json")
    local = results.local
    for stale in [
        *local.glob(".*.tmp-*"),
        *local.glob("plots/.*.tmp-*"),
        *local.glob("plots/privacy_utility/.*.tmp-*"),
    ]:  # being written when a run was killed
        stale.unlink()
    failures: list[tuple[str, str]] = []
    with contextlib.ExitStack() as stack:
        specs = [cell.resolve(build=False) for cell in sweep.cells]
        missing = bases.missing(specs)
        if missing:  # a cell's id needs its models' weights: build them first
            stack.enter_context(ray_session(address, verbose))
            bases.build(missing)
            specs = [cell.resolve(build=False) for cell in sweep.cells]
        write_text(
            local / "sweep.yaml",
            yaml.safe_dump(sweep.resolved([s.cell_id() for s in specs]), sort_keys=False),
        )
        results.upload("sweep.yaml")
        todo = pending(specs, results)
        where = results.uri if results.remote else local
        print(f"sweep '{sweep.name}': {len(specs)} cells, {len(specs) - len(todo)} already done, "
              f"{len(todo)} to run; results in {where}", flush=True)  # fmt: skip
        for dropped in sweep.dropped:
            print(f"  dropped {dropped.model} x {dropped.adaptation}: {dropped.reason}")
        if todo:
            stack.enter_context(ray_session(address, verbose))
            check_placeable(sweep, todo, address)
            failures = run_trials(sweep, todo, results, lambda: leaderboard(results), max_concurrent, verbose)
    failed = {cell_id for cell_id, _ in failures}
    interrupted = [s.cell_id() for s in pending(specs, results) if s.cell_id() not in failed]
    found = leaderboard(results)
    if todo and not interrupted:
        from .tracking import log_leaderboard

        log_leaderboard(sweep.wandb, sweep.name, local, found)
    print(f"leaderboard: {local / 'leaderboard.html'} ({len(found)} rows)")
    if found:
        print(answer_section(write_findings(results, found)))
        print(f"findings: {local / 'findings.md'} (privauditor report {out} prints them)")
        if todo and sweep.wandb.mode == "offline" and (local / "wandb").is_dir():
            print(
                f"W&B: offline runs in {local / 'wandb'}; `wandb sync {local / 'wandb'}/offline-run-*` uploads them"
            )
    for cell_id, error in failures:
        print(f"FAILED {cell_id}: {error}")
    if interrupted:
        for cell_id in interrupted:  # a started cell's partial files stay for inspection; a rerun redoes it
            if (local / "cells" / cell_id).is_dir():
                write_json(local / "cells" / cell_id / "INTERRUPTED", {"cell_id": cell_id})
                results.upload(f"cells/{cell_id}/INTERRUPTED")
        print(
            f"interrupted: {len(interrupted)} cells not finished; run the same command again to finish them"
        )
        return 130
    return 1 if failures else 0
