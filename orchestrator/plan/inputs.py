"""The planner's inputs, read and checked: a price table (instances, devices, utilisation, per-unit seconds;
``clusters/prices.yaml`` by default) and a Ray cluster file's worker node types, priced at that table.
Every structural problem is a one-line error naming the file and the key."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError, unknown_name_message
from privauditor.tasks.infra.strict import check, read_yaml

from .work import UNITS

PRICES = Path(__file__).resolve().parents[2] / "clusters" / "prices.yaml"
GIB = 2**30
LOCAL = "local"  # the instance of the node type that is this machine (a plan without a cluster file)


@dataclass(frozen=True)
class NodeType:
    name: str
    instance: str
    cpus: float
    memory_gb: float
    gpus: int
    device: str  # accelerator name, or "cpu"
    device_memory_gb: float
    usd_per_hour: float
    max_workers: int
    rates: dict[str, float]  # seconds per unit of work
    spot: bool = False  # its node_config asks for spot (preemptible) capacity


@dataclass(frozen=True)
class Instance:
    """A price table's instance type."""

    usd_per_hour: float
    cpus: float
    memory_gb: float
    gpus: int = 0
    device: str = "cpu"
    provider: str | None = None  # the cluster provider's ``type`` that offers it (aws, gcp); None: any


@dataclass(frozen=True)
class Device:
    """A price table's accelerator; its own ``utilisation`` (``--calibrate BENCH.json`` sets it) overrides
    the table's for the kinds it names."""

    memory_gb: float
    peak_flops: float
    utilisation: dict[str, float] | None = None


#: a price table's keys and what each holds
PRICE_TABLE = {"as_of": str, "instances": dict[str, Instance], "devices": dict[str, Device],
               "utilisation": dict[str, float], "gpu_seconds": dict[str, float], "cpu_seconds": dict[str, float],
               "spot_preemptions_per_hour": float}  # fmt: skip
OPTIONAL = ("spot_preemptions_per_hour",)  # keys a price table may leave out
#: expected preemptions of a spot node per node-hour where the price table gives none (its comment: the source)
SPOT_PREEMPTIONS_PER_HOUR = 0.05


def load_prices(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path or PRICES)
    if not path.is_file():
        raise PrivauditorError(f"price table '{path}' does not exist")
    prices = _yaml(path)
    if isinstance(prices.get("as_of"), datetime.date):  # as_of: 2024-06-01 is a date to YAML
        prices["as_of"] = prices["as_of"].isoformat()
    try:
        _check_prices(prices)
    except PrivauditorError as exc:
        raise PrivauditorError(f"price table '{path}': {exc}") from None
    return prices


def _check_prices(prices: dict[str, Any]) -> None:
    """A one-line error unless every key of the price table is known and holds what it should: figures of
    the right type, sizes and speeds > 0, prices and rates >= 0, shares in (0, 1], known units."""
    for key in PRICE_TABLE:
        if key not in prices and key not in OPTIONAL:
            raise PrivauditorError(f"it has no '{key}'")
    for key in prices:
        if key not in PRICE_TABLE:
            raise PrivauditorError(unknown_name_message("key", str(key), list(PRICE_TABLE)))
        check(prices[key], PRICE_TABLE[key], key)
    for name, instance in prices["instances"].items():
        _at_least(instance, ("usd_per_hour", "gpus"), 0, f"instances.{name}")
        _at_least(instance, ("cpus", "memory_gb"), None, f"instances.{name}")
        device = instance.get("device", "cpu")
        if instance.get("gpus") and device not in prices["devices"]:
            raise PrivauditorError(f"instances.{name}.device {device!r} is not under devices")
    for name, device in prices["devices"].items():
        _at_least(device, ("memory_gb", "peak_flops"), None, f"devices.{name}")
        _check_units(device.get("utilisation") or {}, f"devices.{name}.utilisation", True)
    for key in ("utilisation", "gpu_seconds", "cpu_seconds"):
        _check_units(prices[key], key, key == "utilisation")
    rate = prices.get("spot_preemptions_per_hour", 0.0)
    if rate < 0:
        raise PrivauditorError(f"spot_preemptions_per_hour must be >= 0, not {rate!r}")


def _check_units(values: dict[str, float], where: str, shares: bool) -> None:
    """Known units only: shares in (0, 1] of the two kinds of pass, else seconds >= 0 per unit of work."""
    known = ("forward", "train") if shares else UNITS
    for unit, value in values.items():
        if unit not in known:
            raise PrivauditorError(f"{where}: " + unknown_name_message("unit", str(unit), list(known)))
        if value < 0 or (shares and not 0 < value <= 1):
            allowed = "a share in (0, 1]" if shares else "seconds >= 0"
            raise PrivauditorError(f"{where}.{unit} must be {allowed}, not {value!r}")


def _at_least(block: dict[str, Any], keys: tuple[str, ...], floor: float | None, where: str) -> None:
    """Each of ``keys`` given in ``block`` is >= ``floor`` (None: > 0)."""
    for key in keys:
        value = block.get(key)
        if value is not None and (value <= 0 if floor is None else value < floor):
            raise PrivauditorError(
                f"{where}.{key} must be {'> 0' if floor is None else f'>= {floor}'}, not {value!r}"
            )


def device_rates(prices: dict[str, Any], device: str) -> dict[str, float]:
    """Seconds per unit on ``device``: FLOPs at peak times utilisation (the device's own where it has
    one) and the per-text overheads on an accelerator, the CPU table for everything else (and for a
    CPU-only node)."""
    rates = {unit: float(prices["cpu_seconds"].get(unit, 0.0)) for unit in UNITS}
    if device != "cpu":
        listed = prices["devices"][device]
        peak = float(listed["peak_flops"])
        shares = prices["utilisation"] | (listed.get("utilisation") or {})
        rates |= {kind: 1 / (peak * float(share)) for kind, share in shares.items()}
        rates |= {unit: float(s) for unit, s in prices["gpu_seconds"].items()}
    return rates


def read_cluster(
    path: str | Path | None, prices: dict[str, Any], calibrated: dict[str, float] | None
) -> list[NodeType]:
    """A Ray cluster YAML's worker node types, priced (``None``: this machine alone, at no price)."""
    if path is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
        rates = calibrated or device_rates(prices, "cpu")
        return [NodeType("this machine", LOCAL, os.cpu_count() or 1, memory, 0, "cpu", 0.0, 0.0, 1, rates)]
    path = Path(path)
    if not path.is_file() and (PRICES.parent / f"{path.name.removesuffix('.yaml')}.yaml").is_file():
        path = PRICES.parent / f"{path.name.removesuffix('.yaml')}.yaml"  # a shipped cluster by name: aws
    if not path.is_file():
        raise PrivauditorError(f"cluster file '{path}' does not exist")
    config = _yaml(path)
    found = []
    for name, node in _node_types(path, config).items():
        resources, node_config = node.get("resources") or {}, node.get("node_config") or {}
        instance = node_config.get("InstanceType") or node_config.get("machineType") or name
        listed = prices["instances"].get(instance)
        if listed is None:
            raise PrivauditorError(
                f"{path.name}: node type {name}'s instance {instance} is not in the price table"
            )
        gpus = int(resources.get("GPU", listed.get("gpus", 0)))
        device = listed.get("device", "cpu") if gpus else "cpu"
        if device != "cpu" and device not in prices["devices"]:
            raise PrivauditorError(f"price table: device {device} of {instance} is not under 'devices'")
        memory = float(prices["devices"][device]["memory_gb"]) if gpus else 0.0
        workers = int(node.get("max_workers", 1 if name == config.get("head_node_type") else 0))
        rates = calibrated or device_rates(prices, device)
        found.append(NodeType(name, instance, float(resources.get("CPU", listed["cpus"])), float(listed["memory_gb"]),
                              gpus, device, memory, float(listed["usd_per_hour"]), workers, rates,
                              is_spot(node_config)))  # fmt: skip
    if not found:
        raise PrivauditorError(f"{path.name} has no available_node_types (machines of a local cluster are not "
                               "described: plan without --cluster on one of them)")  # fmt: skip
    return found


def is_spot(node_config: dict[str, Any]) -> bool:
    """Whether a node type's ``node_config`` asks for spot capacity: AWS ``InstanceMarketOptions:
    {MarketType: spot}``, GCP ``scheduling: {preemptible: true}`` or ``{provisioningModel: SPOT}``."""
    market = node_config.get("InstanceMarketOptions")
    scheduling = node_config.get("scheduling")
    if isinstance(market, dict) and str(market.get("MarketType", "")).lower() == "spot":
        return True
    if isinstance(scheduling, dict):
        return (
            scheduling.get("preemptible") is True
            or str(scheduling.get("provisioningModel", "")).upper() == "SPOT"
        )
    return False


def _node_types(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """A cluster file's ``available_node_types``, each read part of the type the planner reads (Ray's own
    schema checks the rest when the cluster starts)."""
    types = config.get("available_node_types") or {}
    if not isinstance(types, dict) or not all(isinstance(node, dict) for node in types.values()):
        raise PrivauditorError(f"{path.name}: available_node_types must map node type names to mappings")
    for name, node in types.items():
        where = f"{path.name}: available_node_types.{name}"
        for key in ("resources", "node_config"):
            if not isinstance(node.get(key) or {}, dict):
                raise PrivauditorError(f"{where}.{key} must be a mapping, not {node[key]!r}")
        for key in ("InstanceType", "machineType"):
            value = (node.get("node_config") or {}).get(key)
            if value is not None and not isinstance(value, str):
                raise PrivauditorError(f"{where}.node_config.{key} must be an instance name, not {value!r}")
        resources = node.get("resources") or {}
        for key, value, integer in (("max_workers", node.get("max_workers"), True),
                                    ("resources.GPU", resources.get("GPU"), True),
                                    ("resources.CPU", resources.get("CPU"), False)):  # fmt: skip
            if value is None:
                continue
            if type(value) not in ((int,) if integer else (int, float)) or (
                value < 0 if integer else value <= 0
            ):
                kind = "a whole number >= 0" if integer else "a number > 0"
                raise PrivauditorError(f"{where}.{key} must be {kind}, not {value!r}")
    return types


def _yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping, or a one-line error naming the file (and the line, for malformed YAML)."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise PrivauditorError(f"{path.name} must hold a YAML mapping of keys, not {type(data).__name__}")
    return data
