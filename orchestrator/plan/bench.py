"""A device's utilisation measured by ``benchmarks/gpu_bench.py``: ``plan --calibrate BENCH.json``.

The benchmark's JSON (its ``--out`` file, or the last line of its output) gives, on one accelerator, the
TFLOP/s that privauditor's scoring passes (``scoring`` rows) and training steps (``training`` rows)
reached. Its ``device`` is matched to a ``devices:`` entry of the price table (:func:`match_device`), and
that device's own utilisation (the share of its peak the planner prices FLOPs at) is set from it:

- ``train``: the median ``tflops`` of the ``training`` rows at ``precision: bf16-mixed`` (the registered
  1-7 B shapes' precision; the table's peak is the dense bf16 one, which fp32 steps do not run at);
- ``forward``: the median ``tflops`` of the ``scoring`` rows (those at ``bf16-mixed``, where a row
  names its precision: a GPU benchmark scores at a cell's precision on that device, ``bf16-mixed``);

each divided by the table's ``peak_flops`` for the device and clipped to at most 1. Rows whose ``skipped``
is set are left out. The median, as the rows span shapes and batch sizes and one shape too small to fill
the device should not set the figure. A kind without rows keeps the table's share. A CPU benchmark is
refused: its figures say nothing about an accelerator.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError

BENCH, VERSION = "gpu_bench", 1
PRECISION = "bf16-mixed"
#: the rows each utilisation is the median of: (the benchmark's list, the kind it sets, whether its rows
#: must name the precision; where not, a row that names one must name this one)
KINDS = (("training", "train", True), ("scoring", "forward", False))


def is_benchmark(path: str | Path) -> bool:
    """Whether ``--calibrate`` names a benchmark's JSON rather than a results folder: a ``.json`` file,
    or a file whose last non-empty line is a JSON object with ``"bench": "gpu_bench"``."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.suffix.lower() == ".json":
        return True
    found = _last_line(path.read_bytes().decode("utf-8", "replace"))
    return isinstance(found, dict) and found.get("bench") == BENCH


def read_benchmark(path: str | Path) -> dict[str, Any]:
    """The benchmark's JSON (the whole file, or its last non-empty line), checked; a one-line error for
    a malformed or foreign one."""
    named = f"--calibrate {path}"
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise PrivauditorError(f"{named} is not a text file") from None
    try:
        found = json.loads(text)
    except json.JSONDecodeError:
        found = _last_line(text)
    if not isinstance(found, dict) or found.get("bench") != BENCH:
        raise PrivauditorError(f'{named} is not benchmarks/gpu_bench.py\'s JSON (no "bench": "{BENCH}")')
    if found.get("version") != VERSION:
        raise PrivauditorError(
            f"{named}: benchmark version {found.get('version')!r}, this planner reads {VERSION}"
        )
    for key in ("date", "device"):
        if not isinstance(found.get(key), str) or not found[key]:
            raise PrivauditorError(f"{named}: '{key}' must be a string, not {found.get(key)!r}")
    if found.get("device_type") != "cuda":
        if found.get("device_type") == "cpu":
            raise PrivauditorError(f"{named}: a CPU benchmark cannot calibrate a GPU device")
        raise PrivauditorError(f"{named}: device_type must be cuda or cpu, not {found.get('device_type')!r}")
    _check_rows(found, named)
    return found


def _check_rows(found: dict[str, Any], named: str) -> None:
    """Each list a list of objects, and each row not skipped with its ``tflops`` a number > 0."""
    for key, _, _ in KINDS:
        rows = found.get(key, [])
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise PrivauditorError(f"{named}: '{key}' must be a list of rows (objects)")
        for index, row in enumerate(rows):
            tflops = row.get("tflops")
            if row.get("skipped") is None and (type(tflops) not in (int, float) or not tflops > 0):
                raise PrivauditorError(f"{named}: {key}[{index}].tflops must be a number > 0, not {tflops!r}")


def _last_line(text: str) -> Any:
    """The last non-empty line as JSON (None where it is not JSON)."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


def match_device(name: str, devices: Iterable[str]) -> str:
    """The price table's device a benchmark's ``device`` name is: the entry of that name (any case); else
    the entries whose model (the entry's name up to its first ``-``: ``H200`` of ``H200-141GB``) is a word
    of the name (words split at anything not a letter or digit: ``NVIDIA A100-SXM4-80GB`` has ``a100``,
    ``sxm4``, ``80gb``), narrowed, when several are, to those whose every other part (``80GB``) is a word
    too. A one-line error unless exactly one remains."""
    devices = list(devices)
    exact = [d for d in devices if d.lower() == name.lower()]
    if exact:
        return exact[0]
    words = set(re.split(r"[^0-9a-z]+", name.lower()))
    found = [d for d in devices if d.lower().split("-")[0] in words]
    if len(found) > 1:
        found = [d for d in found if set(d.lower().split("-")[1:]) <= words] or found
    if len(found) == 1:
        return found[0]
    if found:
        raise PrivauditorError(f"benchmark device '{name}' matches several price table devices "
                               f"({', '.join(found)}): rename the one meant in a --prices table")  # fmt: skip
    raise PrivauditorError(f"benchmark device '{name}' matches no price table device ({', '.join(devices)}): "
                           "add it under devices: in a --prices table")  # fmt: skip


def calibrate_device(prices: dict[str, Any], path: str | Path) -> tuple[str, list[str]]:
    """Set the utilisation of the benchmarked device in ``prices`` (in place) from the benchmark at
    ``path``; (the price table's name of the device, the lines saying what was set from which rows)."""
    bench = read_benchmark(path)
    device = match_device(bench["device"], prices["devices"])
    listed = prices["devices"][device]
    peak = float(listed["peak_flops"])
    shares = prices["utilisation"] | (listed.get("utilisation") or {})
    lines, measured = [], 0
    for key, kind, named in KINDS:
        rows = [r for r in bench.get(key, []) if r.get("skipped") is None]
        rows = [r for r in rows if r.get("precision", None if named else PRECISION) == PRECISION]
        which = f"{key} rows" + (f" at precision {PRECISION}" if named else "")
        if not rows:
            lines.append(f"  {kind}: no {which}; it stays {shares.get(kind, 'unset')}, the table's")
            continue
        measured += 1
        median = statistics.median(r["tflops"] for r in rows)
        shares[kind] = min(1.0, median * 1e12 / peak)
        clipped = " (clipped to 1)" if median * 1e12 > peak else ""
        rows_text = "; ".join(_row(r) for r in rows)
        lines.append(f"  {kind} {shares[kind]:.3g}{clipped}: median {median:.4g} TFLOP/s of {len(rows)} "
                     f"{which} ({rows_text})")  # fmt: skip
    if not measured:
        raise PrivauditorError(
            f"--calibrate {path}: no scoring or bf16-mixed training rows to calibrate from"
        )
    listed["utilisation"] = shares
    head = (f"utilisation of {device} (peak {peak / 1e12:g} TFLOP/s) set from {path}: {bench['device']}, "
            f"benchmarked {bench['date']}; other devices keep the table's:")  # fmt: skip
    return device, [head, *lines]


def _row(row: dict[str, Any]) -> str:
    """A row as ``shape technique batch N: X TFLOP/s``."""
    words = [str(row[k]) for k in ("shape", "technique") if row.get(k)]
    return " ".join([*words, f"batch {row.get('batch')}: {row['tflops']:.4g}"])
