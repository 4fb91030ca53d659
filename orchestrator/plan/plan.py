"""``privauditor plan``: what a sweep will cost on a cluster, before it runs (no network, no weights).

Each cell's work (:mod:`~privauditor.orchestrator.plan.work`) is priced at a node type's device rates (seconds
per unit: FLOPs at the device's peak times an assumed utilisation, or rates fitted by ``--calibrate``) and
its memory (:mod:`~privauditor.orchestrator.plan.costs`) is set against the node type's: a cell goes to the
smallest node type it fits (fewest GPUs, then the cheapest), as Ray's autoscaler packs a request onto the
node type it fills best, and a cell that fits none is named. Shared work (views of un-adapted models, the
neighbour texts, the blind control: made once) is charged to the first cell that reads it. Totals: GPU-hours, the
wall time at the cluster's maximum workers (the longer of the longest cell and the node type's busy
node-hours spread over its workers: what a full cluster reaches), and the cost at the node types'
prices plus the head node for the wall time. On this machine (no cluster file) the wall time also holds
the fixed costs of a sweep and of its trials (:func:`fixed_seconds`) and what a first run builds
(:mod:`~privauditor.orchestrator.plan.builds`). The price table and cluster file are read in
:mod:`~privauditor.orchestrator.plan.inputs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .inputs import GIB, LOCAL, NodeType
from .memory import checkpointing_of, memory_parts
from .work import CellWork, Tokens, Work, cell_work

#: Fixed costs of ``privauditor run`` on this machine (no ``--cluster``) beyond its cells' own work, measured
#: from ``privauditor run benchmarks/sweeps/smoke.yaml`` on a 2-core machine (docs/planning.md, 2026-12-05):
SWEEP_S = 16.5  # the command's start to its first trial (imports, cells resolved, Ray and Tune started:
# 10.5 s) and after its last (leaderboard, findings, W&B's offline files, Ray's shut-down: 6 s)
WORKER_S = 11.0  # a trial process's first trial beyond its cell's timings (the process's imports of torch,
# transformers and peft, its attack actor's start); the first load within them is the price table's `process`
TRIAL_S = 1.2  # every trial beyond its cell's timings (Tune's scheduling, the ROC image, W&B's offline run)
MISMATCH = "not this kind of node"  # a GPU cell on a CPU node or the reverse: no reason worth a line
HEADROOM = 0.9  # share of a device's memory a cell may plan to use (the CUDA context, fragmentation)


def seconds(work: Work | dict[str, float], rates: dict[str, float]) -> float:
    units = work.total() if isinstance(work, Work) else work
    return sum(amount * rates.get(unit, 0.0) for unit, amount in units.items())


def memory_bytes(spec: Any, cw: CellWork) -> int:
    """The most one device holds for the cell: the larger of scoring and training, at the cell's
    precision (:func:`~privauditor.orchestrator.plan.memory.memory_parts` gives the parts)."""
    return memory_parts(spec, cw).peak


@dataclass
class Planned:
    spec: Any
    work: CellWork
    memory: int
    gpus: float
    cpus: float
    node: NodeType | None
    seconds: float  # own work plus any shared work charged to it
    usd: float
    why: str = ""
    units: dict[str, float] | None = None  # the work priced: its own and the shared work charged to it
    checkpointing: bool = False  # trained with gradient checkpointing (``train.gradient_checkpointing``)

    @property
    def flops(self) -> tuple[float, float]:
        """(training, scoring) FLOPs: the training stage's, and every other pass (shared work included)."""
        train = self.work.own.stages.get("train", {}).get("train", 0.0)
        units = self.units or {}
        return train, units.get("forward", 0.0) + units.get("train", 0.0) - train

    @property
    def gpu_hours(self) -> float:
        return self.seconds * self.gpus / 3600


def plan_cells(
    sweep: Any, nodes: list[NodeType], tokens_of: Any, best_before_last: float = 1.0
) -> list[Planned]:
    """Every cell of ``sweep`` priced on the node type it goes to (``best_before_last``: see
    :func:`~privauditor.orchestrator.plan.work.cell_work`)."""
    from privauditor.tasks.models import resolve_model

    from .shapes import shape_of

    planned, shared_done = [], set()
    for cell in sweep.cells:
        spec = cell.resolve(build=False)
        recompute = checkpointing_of(spec) or bool(getattr(cell.train, "gradient_checkpointing", False))
        cw = cell_work(spec, shape_of, tokens_of, best_before_last=best_before_last, checkpointing=recompute)
        needs = resolve_model(spec.model).resources
        gpus_each = (
            needs.gpus if sweep.run.gpus_per_trial in ("auto", None) else float(sweep.run.gpus_per_trial)
        )
        gpus = gpus_each * max(1, spec.train.workers)
        cpus = float(sweep.run.cpus_per_trial or needs.cpus) * max(1, spec.train.workers)
        work = cw.own.total()
        for unit, amount in cw.own.stages.get("train", {}).items():  # data parallel over the workers
            work[unit] -= amount * (1 - 1 / max(1, spec.train.workers))
        for key, shared in cw.shared.items():  # shared work, once: by the first cell that reads it
            if key not in shared_done:
                shared_done.add(key)
                work = _merged(work, shared.total())
        memory = memory_parts(spec, cw, recompute).peak
        best, why = placed(nodes, gpus, cpus, memory, work)
        node, time, usd = best or (None, 0.0, 0.0)
        planned.append(Planned(spec, cw, memory, gpus, cpus, node, time, usd, "" if best else "; ".join(why),
                               work, recompute))  # fmt: skip
    return planned


def placed(
    nodes: list[NodeType], gpus: float, cpus: float, memory: int, work: dict[str, float]
) -> tuple[tuple[NodeType, float, float] | None, list[str]]:
    """The node type a cell goes to (the fewest GPUs, then the cheapest, of those it fits), with its
    seconds and dollars; and why it fits none of the others."""
    best, why = None, []
    for node in nodes:
        fits = _fits(node, gpus, cpus, memory)
        if fits:
            why += [] if fits.endswith(MISMATCH) else [f"{node.name}: {fits}"]
            continue
        time = seconds(work, node.rates)
        usd = time / 3600 * node.usd_per_hour * _share(node, gpus, cpus)
        if best is None or (node.gpus, usd) < (best[0].gpus, best[2]):
            best = (node, time, usd)
    return best, why


def _merged(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {unit: a.get(unit, 0.0) + b.get(unit, 0.0) for unit in set(a) | set(b)}


def _share(node: NodeType, gpus: float, cpus: float) -> float:
    """The share of a node a cell holds: its GPUs' share, or its CPUs' on a CPU node."""
    return gpus / node.gpus if node.gpus else min(1.0, cpus / node.cpus)


def _fits(node: NodeType, gpus: float, cpus: float, memory: int) -> str:
    """Why the cell does not fit ``node`` ('' where it fits)."""
    if node.max_workers < 1 or bool(gpus) != bool(node.gpus):
        return MISMATCH
    if node.gpus < gpus:
        return f"needs {gpus:g} GPUs on one node, it has {node.gpus}"
    limit = (node.device_memory_gb if gpus else node.memory_gb) * GIB * HEADROOM
    if memory > limit:
        where = (
            f"{node.device} ({node.device_memory_gb:g} GB)"
            if gpus
            else f"{node.name} ({node.memory_gb:.0f} GB RAM)"
        )
        return f"needs {memory / GIB:.1f} GB per device, over {HEADROOM:.0%} of {where}"
    return ""


def totals(
    planned: list[Planned], nodes: list[NodeType], cluster_head: NodeType | None, builds_s: float = 0.0
) -> dict[str, float]:
    """GPU-hours, node-hours' cost, and the wall time at the cluster's maximum workers. On this machine
    the wall time adds the fixed costs (:func:`fixed_seconds`) and ``builds_s``, what a first run builds."""
    wall, fixed = 0.0, 0.0
    for node in nodes:
        mine = [p for p in planned if p.node is node]
        if mine:
            extra = fixed_seconds(node, mine)
            fixed += extra["sweep"] + (builds_s if node.instance == LOCAL else 0.0)
            longest = max(p.seconds for p in mine) + extra["longest"]
            busy = sum(p.seconds * _share(node, p.gpus, p.cpus) for p in mine) + extra["busy"]
            wall = max(wall, longest, busy / max(1, node.max_workers))
    wall += fixed
    usd = sum(p.usd for p in planned) + (wall / 3600 * cluster_head.usd_per_hour if cluster_head else 0.0)
    return {"gpu_hours": sum(p.gpu_hours for p in planned), "wall_s": wall, "usd": usd,
            "cells": len(planned), "unfit": sum(p.node is None for p in planned), "fixed_s": fixed}  # fmt: skip


def fixed_seconds(node: NodeType, mine: list[Planned]) -> dict[str, float]:
    """The fixed costs of ``mine``, the cells on ``node``, where it is this machine (0 elsewhere): the
    sweep's start and end (``sweep``), each trial's (``TRIAL_S``) and each trial process's first trial
    (``WORKER_S`` and the price table's ``process``: as many processes as trials run at once); in node
    time (``busy``, each at its cell's share of the node) and on the longest cell (``longest``)."""
    if node.instance != LOCAL:
        return {"sweep": 0.0, "busy": 0.0, "longest": 0.0}
    shares = [_share(node, p.gpus, p.cpus) for p in mine]
    processes = min(len(mine), max(1, round(1 / max(shares))))  # trials at once: Tune reuses their processes
    first = WORKER_S + node.rates.get("process", 0.0)
    busy = sum(TRIAL_S * share for share in shares) + processes * first * max(shares)
    return {"sweep": SWEEP_S, "busy": busy, "longest": first + TRIAL_S}


def within_budget(planned: list[Planned], budget: float) -> tuple[list[Planned], list[Planned]]:
    """The cells a budget pays for: every ``none`` control first (a result needs its split's control),
    then the cheapest cells; (kept, left out)."""
    fit = [p for p in planned if p.node is not None]
    order = sorted(fit, key=lambda p: (p.spec.adaptation != "none", p.usd))
    kept, spent = [], 0.0
    for p in order:
        if spent + p.usd <= budget:
            kept.append(p)
            spent += p.usd
    left = [p for p in planned if p not in kept]
    return kept, left


def tokens_for(measure: bool = True) -> Any:
    """``tokens_of(dataset, model, max_length)``: mean tokens per record where the records and the
    tokenizer are at hand offline, else ``max_length``."""
    import functools

    @functools.cache
    def tokens_of(dataset: str, model: str, max_length: int) -> Tokens:
        found = _measured(dataset, model, max_length) if measure else None
        return found or Tokens(max_length, max_length, max_length, False)

    return tokens_of


def _measured(dataset: str, model: str, max_length: int) -> Tokens | None:
    from privauditor.tasks.datasets import DATASETS, load_dataset
    from privauditor.tasks.models import checkpoint_path, resolve_model

    spec = resolve_model(model)
    if not (dataset in DATASETS or Path(dataset).expanduser().is_file()) or spec.source == "hub":
        return None
    path = checkpoint_path(spec, build=False)
    if path is None:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    examples = load_dataset(dataset).examples[:512]
    prompt = [len(tokenizer(e.prompt, add_special_tokens=False).input_ids) for e in examples]
    target = [len(tokenizer(e.target, add_special_tokens=False).input_ids) for e in examples]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    text = mean([min(p + t + 1, max_length) for p, t in zip(prompt, target, strict=True)])
    return Tokens(
        text, mean([min(p, max_length) for p in prompt]), mean([min(t + 1, max_length) for t in target]), True
    )
