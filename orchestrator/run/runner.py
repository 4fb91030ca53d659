"""``privauditor run``: a sweep's cells as Ray Tune trials, finished cells skipped, a leaderboard at the end.

The sweep's cells are resolved first (their ids hash the data and the weights, so offline models that
are missing are built before anything else: ``bases.py``); cells whose folder has ``DONE`` are not
scheduled at all, so a rerun after a crash, or after adding cells to the sweep, runs only what is
missing. The rest run as Ray Tune trials (``trials.py``); work cells share is done once, under file
locks, by the first cell that needs it (shared views, neighbour texts in ``OUT/shared/``). The
leaderboard is rebuilt as trials finish and when the sweep ends. ``OUT`` may be an object-store URI
(``tasks/infra/results.py``). Ctrl-C stops the running cells (marked ``INTERRUPTED``) and keeps what finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privauditor.orchestrator.report.write import answer_section, leaderboard, named_section, write_findings
from privauditor.orchestrator.sweepfile.sweep import Sweep
from privauditor.tasks.infra.files import write_text
from privauditor.tasks.infra.results import Results


def pending(specs: list[Any], results: Results) -> list[Any]:
    """The resolved cells without ``DONE`` in ``results``."""
    return [s for s in specs if not results.done(s.cell_id())]


def run_sweep(
    sweep: Sweep,
    out: str | Path,
    address: str | None = None,
    max_concurrent: int | None = None,
    verbose: bool = False,
    add_spec: bool = False,
    cluster: str | Path | None = None,
) -> int:
    """Run every cell of ``sweep`` that is not DONE in ``out`` (a folder or an object-store URI);
    returns the exit code. A folder holding another sweep's settings is refused unless ``add_spec``;
    a sweep with a cell that fits none of ``cluster``'s node types is refused before Ray starts."""
    import contextlib

    from .trials import check_placeable, check_reachable, ray_session, run_trials

    if cluster is not None:
        check_fits_cluster(sweep, cluster)
    check_reachable(address)  # before the results folder is made: a wrong address leaves nothing behind
    results = Results.open_for_writing(out, sweep.writer(), add_spec)
    failures: list[tuple[str, str]] = []
    with contextlib.ExitStack() as stack:
        specs = _resolved(sweep, lambda: stack.enter_context(ray_session(address, verbose)))
        _write_resolved_sweep(sweep, specs, results)
        todo = pending(specs, results)
        where = results.uri if results.remote else results.root
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
    _report(sweep, results, out, mirrored=bool(todo) and not interrupted)
    for cell_id, error in failures:
        print(f"FAILED {cell_id}: {error}")
    if interrupted:
        for cell_id in interrupted:  # a started cell's partial files stay for inspection; a rerun redoes it
            if results.cell(cell_id).mark_interrupted():
                results.upload(Results.relative(cell_id, "INTERRUPTED"))
        print(
            f"interrupted: {len(interrupted)} cells not finished; run the same command again to finish them"
        )
        return 130
    return 1 if failures else 0


def check_fits_cluster(sweep: Sweep, cluster: str | Path) -> None:
    """Every cell of ``sweep`` planned on the worker node types of the Ray cluster file ``cluster`` (or a
    shipped one by name: aws, gcp), as ``privauditor plan --cluster`` places them; a one-line error
    naming how many cells fit no node type, and the first with its reason. An autoscaler would wait
    for ever for a node that can hold such a cell, so it is refused before anything starts."""
    from privauditor.orchestrator.plan.inputs import load_prices, read_cluster
    from privauditor.orchestrator.plan.plan import plan_cells, tokens_for
    from privauditor.tasks.infra.errors import PrivauditorError

    planned = plan_cells(sweep, read_cluster(cluster, load_prices(), None), tokens_for())
    unfit = [p for p in planned if p.node is None]
    if unfit:
        first = unfit[0]
        why = first.why or f"no node type of its kind ({'GPU' if first.gpus else 'CPU only'})"
        raise PrivauditorError(
            f"{len(unfit)} of {len(planned)} cells fit no node type of cluster '{cluster}' "
            f"(privauditor plan {sweep.name} --cluster {cluster} groups them with what makes each fit): first "
            f"{first.spec.cell_id()}: {why}"
        )


def _resolved(sweep: Sweep, start_ray: Any) -> list[Any]:
    """The sweep's cells resolved; a cell's id needs its models' weights, so missing offline bases are
    built first (on Ray, started by ``start_ray``)."""
    from . import bases

    specs = [cell.resolve(build=False) for cell in sweep.cells]
    missing = bases.missing(specs)
    if missing:
        start_ray()
        bases.build(missing)
        specs = [cell.resolve(build=False) for cell in sweep.cells]
    return specs


def _write_resolved_sweep(sweep: Sweep, specs: list[Any], results: Results) -> None:
    """``OUT/sweep.yaml``: the sweep as it runs, every default filled in, with its cells' ids."""
    from privauditor.tasks.infra.strict import dump_yaml

    text = dump_yaml(sweep.resolved([s.cell_id() for s in specs]), sort_keys=False)
    write_text(results.root / "sweep.yaml", text)
    results.upload("sweep.yaml")


def _report(sweep: Sweep, results: Results, out: str | Path, mirrored: bool) -> None:
    """The leaderboard and findings of what finished (``mirrored``: also the leaderboard to W&B)."""
    found, local = leaderboard(results), results.root
    if mirrored:
        from privauditor.orchestrator.tracking import log_leaderboard

        log_leaderboard(sweep.wandb, sweep.name, local, found)
    print(f"leaderboard: {local / 'leaderboard.html'} ({len(found)} rows)")
    if not found:
        return
    findings = write_findings(results, found)
    print(answer_section(findings))
    audit = named_section(findings, "One-run DP audit")  # a sweep with audit canaries: by technique
    if audit:
        print(audit.split("\n### Per cell")[0])
    shipped = named_section(findings, "As shipped")  # a sweep with shipped forms: by technique and form
    if shipped:
        print(shipped.split("\n### Every attack")[0])
    print(f"findings: {local / 'findings.md'} (privauditor report {out} prints them)")
    if mirrored and sweep.wandb.mode == "offline" and (local / "wandb").is_dir():
        print(
            f"W&B: offline runs in {local / 'wandb'}; `wandb sync {local / 'wandb'}/offline-run-*` uploads them"
        )
