"""What a cluster user should know before ``ray up``: placeholder values left in the cluster file, and
what preemptions are expected to cost on its spot node types.

Spot: expected preemptions of a cell = its hours on the node x the price table's
``spot_preemptions_per_hour`` (an assumption: the table's comment gives its source; absent,
:data:`~privauditor.orchestrator.plan.inputs.SPOT_PREEMPTIONS_PER_HOUR`); each loses the work since the
cell's last saved state: without a drain notice half its training on average (a preemption falls
uniformly in the training), with one a single step (:func:`lost_seconds`'s ``notice``). The lost work is
redone at the node's price; the table's prices are on-demand ones, so the spot discount is not in the total.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .inputs import PRICES, SPOT_PREEMPTIONS_PER_HOUR, _yaml
from .plan import Planned, _share, seconds

#: a value a cluster file ships with, to be replaced: a run of ascending hex digits (ami-0123456789abcdef0,
#: fs-0123456789abcdef0), or a placeholder project name
PLACEHOLDER = re.compile(r"01234567|abcdef0|\bmy-project(-id)?\b")


def cluster_path(cluster: str | Path) -> Path:
    """The cluster file ``--cluster`` names (a shipped one by name: aws)."""
    path = Path(cluster)
    shipped = PRICES.parent / f"{path.name.removesuffix('.yaml')}.yaml"
    return path if path.is_file() or not shipped.is_file() else shipped


def placeholders(cluster: str | Path) -> dict[str, list[str]]:
    """The placeholder values in a cluster file, each with the keys that hold it (dotted, list items by
    index), in the file's order."""
    found: dict[str, list[str]] = {}
    for key, value in _leaves(_yaml(cluster_path(cluster)), ""):
        match = PLACEHOLDER.search(value)
        if match:
            word = next(w for w in re.split(r"[\s:/@'\"()]+", value) if PLACEHOLDER.search(w))
            found.setdefault(word, []).append(key)
    return found


def _leaves(value: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{where}[{i}]")]
    return [(where, value)] if isinstance(value, str) else []


def placeholder_lines(cluster: str | Path) -> list[str]:
    """A line per placeholder value left in the cluster file, naming the keys that hold it."""
    name = cluster_path(cluster).name
    return [f"placeholder in {name}: {', '.join(keys)} = {value}: replace it with yours before `ray up`"
            for value, keys in placeholders(cluster).items()]  # fmt: skip


def lost_seconds(p: Planned, notice: bool | None = None) -> float:
    """The work one preemption of ``p``'s node loses: half its training on average without a drain
    notice, one training step with one (the step's time: the training's over its steps). ``None``: as
    the cell runs, a notice heard where it trains in one process (``tasks/infra/drain.py``; a sweep's trials
    forward it) and not under DeepSpeed."""
    if notice is None:
        notice = p.spec.train.deepspeed is None and p.spec.train.workers == 1
    node = p.node
    assert node is not None
    train = seconds(dict(p.work.own.stages.get("train", {})), node.rates) / max(1, p.spec.train.workers)
    if not notice:
        return train / 2
    records = p.spec.split.members + p.spec.split.known_members
    steps = max(1, p.spec.train.epochs * -(-records // p.spec.train.batch_size))
    return train / steps


def preemptions(mine: list[Planned], rate: float, notice: bool | None = None) -> tuple[float, float, float]:
    """Cells ``mine`` on one spot node type: (expected preemptions, seconds of work they lose, its dollars)."""
    expected = [p.seconds / 3600 * rate for p in mine]
    lost = [n * lost_seconds(p, notice) for n, p in zip(expected, mine, strict=True)]
    usd = sum(
        s / 3600 * p.node.usd_per_hour * _share(p.node, p.gpus, p.cpus)
        for s, p in zip(lost, mine, strict=True)
        if p.node
    )
    return sum(expected), sum(lost), usd


def spot_lines(planned: list[Planned], prices: dict[str, Any], notice: bool | None = None) -> list[str]:
    """On each spot node type: expected preemptions, the work they lose and its cost."""
    rate = float(prices.get("spot_preemptions_per_hour", SPOT_PREEMPTIONS_PER_HOUR))
    by_node: dict[str, list[Planned]] = {}
    for p in planned:
        if p.node is not None and p.node.spot:
            by_node.setdefault(p.node.name, []).append(p)
    lines = []
    for name, mine in by_node.items():
        expected, lost, usd = preemptions(mine, rate, notice)
        each = (
            "one step each where a cell trains in one process (its drain notice saves the step), half a cell's "
            "training under DeepSpeed" if notice is None
            else "one step each (a drain notice)" if notice else "half a cell's training each (no drain notice)"
        )  # fmt: skip
        lines.append(f"spot node type {name}: {expected:.3g} expected preemptions over its {len(mine)} cells "
                     f"({rate:g} per node-hour, an assumption: the price table's spot_preemptions_per_hour), losing "
                     f"{_hours(lost)} of work, {each}: about ${usd:.2f} more (on-demand prices: the spot discount "
                     "is not in the total)")  # fmt: skip
    return lines


def _hours(count: float) -> str:
    return f"{count / 3600:.2f} h" if count >= 3600 else f"{count / 60:.3g} min"
