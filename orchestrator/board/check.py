"""``privauditor board add`` and ``board check``: what goes into a store, and what a store may hold.

A store is valid when every file under ``records/`` is a record at ``records/<key>/<content hash>.json``
in canonical form, of a schema version this privauditor reads (2, or 1 upgraded in memory:
:func:`.records.upgrade`), with its required provenance and no per-sample field
(:func:`.records.problems`); no key holds two versions (writers that raced
on an object store); every record a correction supersedes is in the store; and each split of each run
carries its controls: the un-adapted base (``none``) and the model-free ``blind`` attack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError

from .records import canonical, content_hash, from_results, identity, problems, upgrade
from .store import Store


def control_problems(records: list[dict[str, Any]]) -> list[str]:
    """One line per split of a run without its ``none`` cell or its ``blind`` attack."""
    groups: dict[tuple, dict[str, bool]] = {}
    for r in records:
        split = json.dumps(r["provenance"]["split"], sort_keys=True)
        group = groups.setdefault((r["run"], r["model"], r["dataset"], r["seed"], split), {})
        group["none"] = group.get("none", False) or (r["adaptation"] == "none" and r["defence"] == "none")
        group["blind"] = group.get("blind", False) or "blind" in r["attacks"]
    found = []
    for (run, model, dataset, seed, _), has in sorted(groups.items()):
        missing = [f"`{name}`" for name in ("none", "blind") if not has[name]]
        if missing:
            found.append(
                f"run {run[:8]}, {model} on {dataset} seed {seed}: the split has no {' and no '.join(missing)} "
                "control (add adaptation none and attack blind to the sweep)"
            )
    return found


def check(store: Store) -> tuple[list[dict[str, Any]], list[str]]:
    """The store's valid records and its problems, one line each."""
    records, found = [], []
    for key, paths in sorted(store.records().items()):
        if len(paths) > 1:
            found.append(f"records/{key}/: conflict: {len(paths)} versions of one record "
                         f"({', '.join(p.rsplit('/', 1)[1] for p in paths)}): two writers raced")  # fmt: skip
        for path in paths:
            parts = path.split("/")
            if len(parts) != 3 or not parts[2].endswith(".json"):
                found.append(f"{path}: not a record's place (records/<key>/<content hash>.json)")
                continue
            data, record = store.read(path), store.load(path)
            wrong = problems(record, path)
            if not wrong:
                if canonical(record) != data:
                    wrong.append(f"{path}: not in canonical form (sorted keys, no spaces, one final newline)")
                elif content_hash(data) != parts[2][: -len(".json")]:
                    wrong.append(f"{path}: its bytes hash to {content_hash(data)}, not to its name")
                elif record["key"] != key:
                    wrong.append(f"{path}: record {record['key']} filed under key {key}")
            found += wrong
            if not wrong:
                records.append(upgrade(record))
    keys = {r["key"] for r in records}
    for r in records:
        found += [
            f"record {r['key']} supersedes {s}, which is not in the store"
            for s in r["supersedes"]
            if s not in keys
        ]
    return records, found + control_problems(records)


def versions_line(records: list[dict[str, Any]]) -> str | None:
    """A line saying how a store mixes record schema versions (None: one version throughout). An older
    version's records are read, never dropped: the columns added since are empty in them."""
    from .records import SCHEMA_VERSION

    counts: dict[int, int] = {}
    for r in records:
        counts[r["schema_version"]] = counts.get(r["schema_version"], 0) + 1
    if len(counts) < 2:
        return None
    parts = ", ".join(f"{n} of version {v}" for v, n in sorted(counts.items()))
    return (f"mixed record schema versions: {parts}; records before version {SCHEMA_VERSION} are read with "
            "the columns added since empty")  # fmt: skip


def valid_records(store: Store) -> list[dict[str, Any]]:
    """Every record, or a one-line error naming the first problem and how many there are."""
    records, found = check(store)
    if found:
        more = f" (and {len(found) - 1} more: privauditor board check {store.uri})" if len(found) > 1 else ""
        raise PrivauditorError(f"store {store.uri}: {found[0]}{more}")
    return records


def _supersedes(store: Store, names: list[str]) -> dict[tuple, str]:
    """(model, technique, dataset, seed, step) → the key a new record supersedes, from record keys or
    run ids of records in the store."""
    records = valid_records(store)
    mapping = {}
    for name in names:
        chosen = [r for r in records if name in (r["key"], r["run"])]
        if not chosen:
            raise PrivauditorError(f"--supersedes {name} names no record key or run id in {store.uri}")
        mapping |= {identity(r): r["key"] for r in chosen}
    return mapping


def add(results: str | Path, location: str | Path, supersedes: list[str] | None = None) -> tuple[int, int]:
    """Add a results folder's records to the store; returns (written, already there). All or nothing:
    a bad record or a conflict refuses the whole folder before anything is written."""
    mapping = _supersedes(Store(location), supersedes) if supersedes else {}
    records = from_results(results, mapping)
    if not records:
        raise PrivauditorError(f"{results} has no finished cells to add")
    found = [p for r in records for p in problems(r, r["cell_id"])] + control_problems(records)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PrivauditorError(f"{results}: {found[0]}{more}")
    store = Store(location, create=True)  # made only once the records are known to be good
    with store.lock():
        todo = []
        for r in records:
            data = canonical(r)
            name = f"records/{r['key']}/{content_hash(data)}.json"
            there = store.list(f"records/{r['key']}")
            if there and name not in there:
                raise PrivauditorError(
                    f"conflict: record {r['key']} ({r['cell_id']}, step {r['step']}) is in {store.uri} as "
                    f"{there[0]}, and these results give {name}: a correction is a new run (board add --supersedes)"
                )
            if not there:
                todo.append((name, data))
        for name, data in todo:
            store.write_new(name, data)
        _add_attempts(results, store)
    return len(todo), len(records) - len(todo)


def _add_attempts(results: str | Path, store: Store) -> None:
    """The results folder's confirmatory attempts (``hypothesis_attempts.jsonl``), one immutable file each
    under ``attempts/<hypothesis>/<cells>.json``: the board counts a hypothesis's attempts over every run."""
    from privauditor.orchestrator.sweepfile.attempts import ATTEMPTS, read_attempts
    from privauditor.tasks.infra.results import Results

    found = Results.at(results)
    if not found.fetch(ATTEMPTS):
        return
    for entry in read_attempts(found.root / ATTEMPTS):
        write_attempt(store, entry)


def write_attempt(store: Store, entry: dict[str, Any]) -> None:
    """A confirmatory attempt, once (the same hypothesis on the same cells is the same attempt)."""
    data = json.dumps(entry, sort_keys=True).encode()
    store.write_new(f"attempts/{entry['hypothesis']}/{entry['cells']}.json", data, exist_ok=True)


def stored_attempts(store: Store, hypothesis: Any) -> int:
    """How many confirmatory attempts of ``hypothesis`` the store holds."""
    return len(store.list(f"attempts/{hypothesis.digest()}"))
