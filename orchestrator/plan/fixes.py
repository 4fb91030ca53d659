"""The cells that fit no node type, grouped by model and technique, each group with the cheapest change
that would make it fit, tried in order of what it costs:

1. a larger node type: an instance of the price table (of the cluster's provider) with more memory per
   device than any of the cluster's, the cheapest per hour (added to the cluster file, no setting
   changes);
2. gradient checkpointing (``train.gradient_checkpointing``): one more forward per training step;
3. where the technique trains many parameters (:data:`MANY_TRAINED`), DeepSpeed ZeRO stage 3 with CPU
   offload (``train.deepspeed``), and then both: offload moves the optimizer's states and the trained
   weights to the host and slows every step by their transfers (not priced here);

else none: the group needs a node with more memory per device than any of these leave it wanting.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .inputs import GIB, NodeType
from .memory import memory_parts
from .plan import HEADROOM, MISMATCH, Planned, _fits, placed
from .work import cell_work

#: trained-parameter state (fp32 weights, gradients, AdamW moments) from which offloading it is worth trying
MANY_TRAINED = GIB
CHECKPOINTING: tuple[str, ...] = ("train.gradient_checkpointing=true",)
OFFLOAD: tuple[str, ...] = ("train.deepspeed.stage=3", "train.deepspeed.offload=true")


@dataclass(frozen=True)
class Fix:
    """What would make a group fit: the ``--set`` assignments (none for a larger node type), the node
    type it would go to, its memory per device then, and the group's cost there."""

    sets: tuple[str, ...]
    node: str
    usd_per_hour: float
    memory: int
    usd: float
    added: bool = False  # the node type is one to add to the cluster file


def groups(planned: list[Planned]) -> dict[tuple[str, str], list[Planned]]:
    """The cells that fit no node type, by (model, technique), in the plan's order."""
    found: dict[tuple[str, str], list[Planned]] = defaultdict(list)
    for p in planned:
        if p.node is None:
            found[(p.spec.model, p.spec.adaptation)].append(p)
    return dict(found)


def reason(group: list[Planned], nodes: list[NodeType]) -> str:
    """Why the group fits none: the reason on the node type with the most memory per device."""
    p = max(group, key=lambda q: q.memory)
    candidates = [n for n in nodes if not _fits(n, p.gpus, p.cpus, p.memory).endswith(MISMATCH)]
    closest = max(
        candidates, key=lambda n: (n.gpus >= p.gpus, n.device_memory_gb or n.memory_gb), default=None
    )
    return _fits(closest, p.gpus, p.cpus, p.memory) if closest else p.why


def cheapest_fix(
    group: list[Planned], nodes: list[NodeType], prices: dict[str, Any], provider: str | None, shape_of: Any,
    tokens_of: Any,
) -> Fix | int:  # fmt: skip
    """The first of the fixes (module docstring) that makes every cell of ``group`` fit, or the memory
    per device (bytes) the group needs at the least of them."""
    larger = _larger_node(group, nodes, prices, provider)
    if larger is not None:
        return larger
    least = max(p.memory for p in group)
    for sets in _settings(group):
        found = [_with(p, sets, nodes, shape_of, tokens_of) for p in group]
        least = min(least, max(memory for memory, _ in found))
        places = [best for _, best in found if best is not None]
        if len(places) == len(found):
            node = places[0][0]
            usd = sum(place[2] for place in places)
            return Fix(sets, node.name, node.usd_per_hour, max(m for m, _ in found), usd)
    return least


def _settings(group: list[Planned]) -> list[tuple[str, ...]]:
    """The settings to try, cheapest first: checkpointing, and where much trains, offloading, then both."""
    p = group[0]
    tried: list[tuple[str, ...]] = [] if p.checkpointing else [CHECKPOINTING]
    if memory_parts(p.spec, p.work, p.checkpointing).trained >= MANY_TRAINED:
        tried += [OFFLOAD] + ([] if p.checkpointing else [CHECKPOINTING + OFFLOAD])
    return tried


def _with(
    p: Planned, sets: tuple[str, ...], nodes: list[NodeType], shape_of: Any, tokens_of: Any
) -> tuple[int, tuple[NodeType, float, float] | None]:
    """A cell's memory per device with the settings ``sets``, and where it then goes (its own work)."""
    from privauditor.tasks.spec.sections import DeepSpeedSettings

    spec, recompute = p.spec, p.checkpointing or CHECKPOINTING[0] in sets
    if OFFLOAD[0] in sets:
        bf16 = spec.train.deepspeed.bf16 if spec.train.deepspeed else None
        train = dataclasses.replace(spec.train, deepspeed=DeepSpeedSettings(stage=3, offload=True, bf16=bf16))
        spec = dataclasses.replace(spec, train=train)
    memory = memory_parts(spec, p.work, recompute).peak
    work = p.units or {}
    if recompute and not p.checkpointing:  # the training forward again: priced from the cell's own work
        cw = cell_work(p.spec, shape_of, tokens_of, checkpointing=True)
        extra = cw.own.stages["train"]["train"] - p.work.own.stages["train"]["train"]
        work = dict(work) | {"train": work.get("train", 0.0) + extra / max(1, p.spec.train.workers)}
    best, _ = placed(nodes, p.gpus, p.cpus, memory, work)
    return memory, best


def _larger_node(
    group: list[Planned], nodes: list[NodeType], prices: dict[str, Any], provider: str | None
) -> Fix | None:
    """The cheapest instance of the price table (of ``provider``) not in the cluster that holds every
    cell of the group as it is, with as many GPUs as a cell asks for."""
    p = max(group, key=lambda q: q.memory)
    used = {n.instance for n in nodes}
    best = None
    for name, instance in prices["instances"].items():
        gpus = int(instance.get("gpus", 0))
        if name in used or gpus < p.gpus or not gpus or instance.get("provider", provider) != provider:
            continue
        memory = float(prices["devices"][instance["device"]]["memory_gb"])
        price = float(instance["usd_per_hour"])
        if p.memory <= memory * GIB * HEADROOM and (best is None or price < best[1]):
            best = (name, price, memory)
    if best is None:
        return None
    name, price, _ = best
    hours = sum(q.seconds for q in group) / 3600  # at the cluster's device rates: a lower bound's order
    return Fix((), name, price, p.memory, hours * price * p.gpus / max(1, int(prices["instances"][name]["gpus"])),
               added=True)  # fmt: skip


def fix_text(fix: Fix | int, cells: int) -> str:
    """What to change, the exact ``--set`` where a setting changes, and what the group costs then."""
    if isinstance(fix, int):
        return f"no setting makes it fit: needs a node with {fix / GIB / HEADROOM:.1f} GB per device"
    each = "the cell" if cells == 1 else f"the {cells} cells"
    if fix.added:
        return (f"fix: add a node type with instance {fix.node} (${fix.usd_per_hour:g}/h) to the cluster file; "
                f"about ${fix.usd:.2f} for {each}")  # fmt: skip
    sets = " ".join(f"--set {s}" for s in fix.sets)
    return (f"fix: {sets} ({fix.memory / GIB:.1f} GB per device: {fix.node}, ${fix.usd_per_hour:g}/h; "
            f"about ${fix.usd:.2f} for {each})")  # fmt: skip


def group_lines(
    planned: list[Planned], nodes: list[NodeType], prices: dict[str, Any], provider: str | None, shape_of: Any,
    tokens_of: Any,
) -> list[str]:  # fmt: skip
    """One line per group of cells that fit no node type: how many, why, and the cheapest fix."""
    lines = []
    for (model, technique), group in groups(planned).items():
        fix = cheapest_fix(group, nodes, prices, provider, shape_of, tokens_of)
        who = (f"{len(group)} cells of {model} x {technique}" if len(group) > 1
               else f": {group[0].spec.cell_id()} ({model} x {technique})")  # fmt: skip
        head = f"fits no node type, {who}" if len(group) > 1 else f"fits no node type{who}"
        lines.append(f"{head}: {reason(group, nodes)}; {fix_text(fix, len(group))}")
    if lines:
        lines.append("  (a --set changes every cell of the sweep, and the ids of those it changes; to change one "
                     "group only, add it to the sweep's overrides: {model: M, adaptation: T, train: {...}})")  # fmt: skip
    return lines
