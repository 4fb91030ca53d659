"""What ``privauditor plan`` prints: per cell (``--cells``) and in total, the cells that fit no node type,
what a budget pays for, the fitted rates (``--calibrate``) and predictions against a run (``--compare``)."""

from __future__ import annotations

import argparse
import math
import os
from collections import Counter
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError

from .. import tables
from .builds import build_seconds, builds_line, first_builds
from .fixes import group_lines
from .inputs import GIB, NodeType, load_prices, read_cluster
from .notes import placeholder_lines, spot_lines
from .plan import SWEEP_S, TRIAL_S, WORKER_S, Planned, plan_cells, tokens_for, totals, within_budget
from .storage import storage_line

TERA = 1e12


def plan_report(args: argparse.Namespace) -> str:
    from .shapes import registered

    with registered(args.params):
        return _report(args)


def _report(args: argparse.Namespace) -> str:
    from privauditor.orchestrator.sweepfile.sweep import load_sweep

    from .bench import calibrate_device, is_benchmark
    from .calibrate import calibrate, compare, error_summary
    from .shapes import shape_of

    budget = _budget(args.budget_usd)
    try:
        sweep = load_sweep(args.sweep, args.set or [])
    except PrivauditorError as exc:
        if "is not registered" not in str(exc):
            raise
        raise PrivauditorError(
            f"{exc}; to plan it, give --params ID=SIZE:FAMILY or ID=path/to/config.json"
        ) from None
    prices = load_prices(args.prices)
    tokens_of = tokens_for()
    lines, rates, benchmarked = [], None, None
    if args.calibrate and is_benchmark(args.calibrate):  # a GPU benchmark: one device's utilisation
        benchmarked, said = calibrate_device(prices, args.calibrate)
        lines += said
    elif args.calibrate:
        rates = calibrate(
            args.calibrate,
            float(prices["cpu_seconds"].get("load_byte", 0.0)),
            shape_of,
            tokens_of,
            "--calibrate",
        )
        lines.append(f"rates fitted to {args.calibrate} (seconds per unit; every node type gets them):")
        lines.append("  " + ", ".join(f"{unit} {value:.3g}" for unit, value in rates.items()))
    nodes = read_cluster(args.cluster, prices, rates)
    head = next((n for n in nodes if n.max_workers and not n.gpus and args.cluster), None)
    planned = plan_cells(sweep, nodes, tokens_of, (rates or {}).get("best_before_last", 1.0))
    where = args.cluster or "this machine"
    source = f"fitted to {args.calibrate}" if rates else f"the price table's (as of {prices['as_of']})"
    if benchmarked:
        used = any(n.device == benchmarked for n in nodes)
        source += f", {benchmarked}'s utilisation from {args.calibrate}" + (
            "" if used else " (no node type has it)"
        )
    lines.append(f"sweep '{sweep.name}': {len(planned)} cells on {where}; device rates: {source}")
    if args.cells:
        lines.append(tables.render(["cell_id", "node type", "gpus", "train TFLOP", "scoring TFLOP", "memory GB",
                                    "hours", "usd"], [_row(p) for p in planned]))  # fmt: skip
    if args.cluster:
        lines += _cluster_lines(args.cluster, planned, nodes, prices, shape_of, tokens_of)
    lines += _total_lines(planned, nodes, head, local=args.cluster is None)
    if args.cluster:
        lines += [storage_line(planned), *spot_lines(planned, prices), *placeholder_lines(args.cluster)]
    measured = sum(p.work.tokens.measured for p in planned)
    lines.append(f"tokens per record: measured on {measured} of {len(planned)} cells' records; max_length (an upper "
                 "bound) where the records or the tokenizer are not at hand offline")  # fmt: skip
    if budget is not None:
        lines.append(_budget_line(planned, budget))
    if args.compare:
        if rates is None:
            from .inputs import device_rates

            rates = device_rates(prices, "cpu")
        found = compare(args.compare, rates, shape_of, tokens_of, "--compare")
        lines.append(
            f"predicted against {args.compare}, each cell's own work: {error_summary(found['errors'])}"
        )
        lines.append(f"shared work of {len(found['splits'])} splits: predicted "
                     + ", ".join(f"{p:.0f} s vs {m:.0f} s" for p, m in found["splits"]))  # fmt: skip
        lines.append(
            f"whole sweep: predicted {found['predicted_s']:.0f} s of cell time, measured {found['measured_s']:.0f} s"
        )
    return "\n".join(lines)


def _cluster_lines(
    cluster: str, planned: list[Planned], nodes: list[NodeType], prices: dict, shape_of: Any, tokens_of: Any
) -> list[str]:
    """The cells that fit no node type, a line per model and technique with its cheapest fix."""
    from .inputs import _yaml
    from .notes import cluster_path

    provider = (_yaml(cluster_path(cluster)).get("provider") or {}).get("type")
    return group_lines(planned, nodes, prices, provider, shape_of, tokens_of)


def _budget(text: str | float | None) -> float | None:
    """``--budget-usd`` as a number of dollars > 0 (None: not given); else a one-line error."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise PrivauditorError(f"--budget-usd must be a number of dollars > 0, not {text!r}")
    return value


def _row(p: Planned) -> list:
    train, scoring = p.flops
    return [p.spec.cell_id(), p.node.name if p.node else "-", f"{p.gpus:g}", f"{train / TERA:.4g}",
            f"{scoring / TERA:.4g}", f"{p.memory / GIB:.1f}", f"{p.seconds / 3600:.3f}", f"{p.usd:.2f}"]  # fmt: skip


def _totals_line(found: dict, planned: list[Planned], nodes: list, head) -> str:
    used = Counter(p.node.name for p in planned if p.node)
    spread = ", ".join(f"{name} {count} cells (max {n.max_workers} workers)" for n in nodes
                       for name, count in used.items() if n.name == name)  # fmt: skip
    unfit = found["unfit"]
    left = f"; {unfit} cells left out: they fit no node type (above)" if unfit else ""
    fit = len(planned) - unfit
    which = f"the {fit} cells that fit" if unfit else f"all {fit} cells"
    head_note = f", the head node {head.name} included" if head else ""
    train, scoring = (sum(p.flops[i] for p in planned) for i in (0, 1))
    flops = f"{_num(train / 1e15)} PFLOP of training, {_num(scoring / 1e15)} PFLOP of scoring; "
    return (f"total: {flops}{_num(found['gpu_hours'])} GPU-hours, wall time {_duration(found['wall_s'])} at the "
            f"cluster's maximum workers, cost ${found['usd']:.2f} for {which}{head_note}; {spread}{left}")  # fmt: skip


def _total_lines(
    planned: list[Planned], nodes: list[NodeType], head: NodeType | None, local: bool
) -> list[str]:
    """The totals; on this machine (``local``) the fixed costs in its wall time; what a first run builds
    (in the wall time on this machine, named only for a cluster)."""
    builds = first_builds([p.spec for p in planned])
    builds_s = build_seconds(builds, os.cpu_count() or 1)
    lines = [_totals_line(totals(planned, nodes, head, builds_s if local else 0.0), planned, nodes, head)]
    if local and planned:
        lines.append(_fixed_line(nodes[0]))
    if builds:
        lines.append(builds_line(builds, builds_s, local))
    return lines


def _fixed_line(node: NodeType) -> str:
    """What the wall time on this machine holds besides the cells' own work (plan.py's measured constants)."""
    first = WORKER_S + node.rates.get("process", 0.0)
    return (f"fixed costs in the wall time on this machine: {SWEEP_S:g} s for the sweep's start and its report, "
            f"{first:.3g} s for each trial process's first trial, {TRIAL_S:g} s for each trial")  # fmt: skip


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def _num(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.4g}"


def _budget_line(planned: list[Planned], budget: float) -> str:
    kept, left = within_budget(planned, budget)
    spent = sum(p.usd for p in kept)
    out = Counter(f"{p.spec.model} x {p.spec.adaptation}" for p in left if p.node is not None)
    left_text = "; ".join(f"{name} ({n} cells)" for name, n in sorted(out.items())) or "nothing"
    unfit = sum(p.node is None for p in planned)
    return (f"budget ${budget:g}: {len(kept)} of {len(planned)} cells fit (${spent:.2f}, every none control "
            f"first, then the cheapest); left out for the budget: {left_text}"
            + (f"; and the {unfit} that fit no node type" if unfit else ""))  # fmt: skip
