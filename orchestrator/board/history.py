"""``privauditor board release STORE NAME``: a release manifest, what changed between releases, and the
board's mirror on W&B.

``releases/<NAME>.json`` lists the records the release holds (their files), those it leaves out as
superseded, and the board's summary at that moment: every setting row's AUC and the ranking of
techniques. The history page compares each release with the one before it (and the store's current
records with the last release): rows that are new, rows whose AUC moved (more seeds, a correction), rows
that left, techniques whose rank changed, and records superseded since. A release name is used once.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from privauditor.tasks.errors import PrivauditorError

from .check import valid_records
from .merge import cell_rows, live, ranking, setting_rows
from .store import BOARD_FORMAT, Store

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def summary(store: Store, records: list[dict[str, Any]], settings: list[dict[str, Any]]) -> dict[str, Any]:
    """The board's state (what a manifest holds, and the history page's ``unreleased`` entry) from its
    records and their setting rows."""
    kept = live(records)
    keys = {r["key"] for r in kept}
    return {
        "records": sorted(p for key, paths in store.records().items() if key in keys for p in paths),
        "superseded": sorted({r["key"] for r in records} - keys),
        "rows": {
            f"{r['setting']}/{r['epoch']}/{r['attack']}": {
                k: r[k] for k in ("model", "technique", "dataset", "epoch", "attack", "auc", "n_seeds")
            }
            for r in settings
        },
        "ranking": [[name, auc] for name, auc in ranking(settings)],
        "counts": {"records": len(kept), "runs": len({r["run"] for r in kept}), "cells": len({r["cell_id"] for r in kept}),
                   "settings": len({r["setting"] for r in settings}), "rows": len(settings)},
    }  # fmt: skip


def manifests(store: Store) -> list[dict[str, Any]]:
    """Every release's manifest, oldest first."""
    found = [json.loads(store.read(p)) for p in store.list("releases") if p.endswith(".json")]
    return sorted(found, key=lambda m: (m["sequence"], m["name"]))


def release(
    location: str | Path, name: str, wandb_project: str | None = None, wandb_dir: str | None = None
) -> dict[str, Any]:
    """Write the release manifest ``releases/<name>.json``; returns it."""
    if not NAME.match(name):
        raise PrivauditorError(f"release name {name!r}: letters, digits, '.', '_' and '-' only, at most 64")
    store = Store(location)
    records = valid_records(store)
    if not records:
        raise PrivauditorError(
            f"store {store.uri} holds no records to release: board add a results folder first"
        )
    settings = setting_rows(cell_rows(records))
    earlier = manifests(store)
    manifest = {
        "board_format": BOARD_FORMAT, "name": name, "sequence": len(earlier) + 1,
        "previous": earlier[-1]["name"] if earlier else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    } | summary(store, records, settings)  # fmt: skip
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    if not store.write_new(f"releases/{name}.json", data):
        raise PrivauditorError(f"release {name} is already in {store.uri}: a release name is used once")
    if wandb_project:
        _wandb(manifest, settings, wandb_project, wandb_dir)
    return manifest


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """What changed from one board summary to the next (``before`` None: everything is new)."""
    old_rows = before["rows"] if before else {}
    new_rows = after["rows"]
    moved = [
        (k, old_rows[k], row)
        for k, row in new_rows.items()
        if k in old_rows and old_rows[k]["auc"] != row["auc"]
    ]
    old_rank = {t: i + 1 for i, (t, _) in enumerate(before["ranking"])} if before else {}
    ranks = [
        (t, old_rank.get(t), i + 1, auc)
        for i, (t, auc) in enumerate(after["ranking"])
        if old_rank.get(t) != i + 1
    ]
    order = lambda row: (row["model"], row["technique"], row["dataset"], row["epoch"] or 0, row["attack"])  # noqa: E731
    return {
        "new": sorted((row for k, row in new_rows.items() if k not in old_rows), key=order),
        "moved": sorted(moved, key=lambda m: order(m[2])),
        "gone": sorted((row for k, row in old_rows.items() if k not in new_rows), key=order),
        "ranks": ranks,
        "superseded": sorted(set(after["superseded"]) - set(before["superseded"] if before else [])),
        "records": len(set(after["records"]) - set(before["records"] if before else [])),
    }


def _wandb(
    manifest: dict[str, Any], settings: list[dict[str, Any]], project: str, folder: str | None
) -> None:
    """The release as a W&B run: the setting rows as a Table and the manifest and rows as an artifact
    version aliased with the release's name (``WANDB_MODE``, else offline)."""
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq
    import wandb

    from .merge import SETTING_COLUMNS

    mode = os.environ.get("WANDB_MODE") or "offline"
    if mode == "disabled":
        return
    folder = str(Path(folder or ".").resolve())
    run = wandb.init(project=project, name=f"board-{manifest['name']}", job_type="board-release", mode=mode,
                     dir=folder, reinit="finish_previous", settings=wandb.Settings(silent=True))  # fmt: skip
    run.log(
        {
            "board": wandb.Table(
                columns=SETTING_COLUMNS, data=[[r[c] for c in SETTING_COLUMNS] for r in settings]
            )
        }
    )
    artifact = wandb.Artifact("privauditor-board", type="leaderboard", metadata=manifest["counts"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "release.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        pq.write_table(pa.Table.from_pylist(settings), Path(tmp) / "settings.parquet")
        artifact.add_file(str(Path(tmp) / "release.json"))
        artifact.add_file(str(Path(tmp) / "settings.parquet"))
        run.log_artifact(artifact, aliases=[manifest["name"], "latest"])
        run.finish()
