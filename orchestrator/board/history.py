"""``privauditor board release STORE NAME``: a release manifest, what changed between releases, and the
board's mirror on W&B.

``releases/<NAME>.json`` lists the records the release holds (their files), those it leaves out as
superseded, and the board's summary at that moment: every setting row's AUC (keyed by setting, step and
attack) and the battery's ranking of techniques (:func:`.ranked.summary_of`: names, mean ranks and AUCs,
significant pairs). The history page compares each release with the one before it (and the store's
current records with the last release): rows that are new, rows whose AUC moved (more seeds, a
correction), rows that left, techniques that swapped places with one the newer battery separates them
from (any other change of order is within the noise: :func:`.ranked.moves`), and records superseded
since. A release name is used once. Releases written before these summaries (rows keyed by epoch, a
ranking of mean AUCs) are still compared: their rows by epoch, their order with no pair separated.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError

from .check import valid_records
from .merge import cell_rows, live, setting_rows
from .ranked import moves, rank, summary_of
from .store import BOARD_FORMAT, Store

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _key(row: dict[str, Any], by: str = "step") -> str:
    """A setting row's name in a summary: setting, step (epoch, as releases before steps had it), attack."""
    value = row[by]
    if isinstance(value, float) and value.is_integer():  # a whole epoch, as schema-1 summaries wrote it
        value = int(value)
    return f"{row['setting']}/{value}/{row['attack']}"


def summary(
    store: Store, records: list[dict[str, Any]], settings: list[dict[str, Any]], found: Any
) -> dict[str, Any]:
    """The board's state (what a manifest holds, and the history page's ``unreleased`` entry) from its
    records, their setting rows and the battery ``found`` (:func:`.ranked.rank`)."""
    kept = live(records)
    keys = {r["key"] for r in kept}
    fields = ("model", "technique", "dataset", "epoch", "step", "attack", "auc", "n_seeds")
    return {
        "records": sorted(p for key, paths in store.records().items() if key in keys for p in paths),
        "superseded": sorted({r["key"] for r in records} - keys),
        "rows": {_key(r): {k: r[k] for k in fields} for r in settings},
        "ranking": summary_of(found),
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
    if wandb_project is not None:  # checked before anything is written
        from privauditor.orchestrator.sweepfile.sweep import check_project

        check_project(wandb_project, "--wandb-project")
    if wandb_dir is not None and Path(wandb_dir).exists() and not Path(wandb_dir).is_dir():
        raise PrivauditorError(f"--wandb-dir {wandb_dir} is a file, not a folder")
    store = Store(location)
    records = valid_records(store)
    if not records:
        raise PrivauditorError(
            f"store {store.uri} holds no records to release: board add a results folder first"
        )
    cells = cell_rows(records)
    settings = setting_rows(cells)
    earlier = manifests(store)
    manifest = {
        "board_format": BOARD_FORMAT, "name": name, "sequence": len(earlier) + 1,
        "previous": earlier[-1]["name"] if earlier else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    } | summary(store, records, settings, rank(cells)[0])  # fmt: skip
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
    if old_rows and not all("step" in row for row in old_rows.values()):  # a release keyed by epoch
        new_rows = {_key(row, "epoch"): row for row in new_rows.values()}
    moved = [
        (k, old_rows[k], row)
        for k, row in new_rows.items()
        if k in old_rows and old_rows[k]["auc"] != row["auc"]
    ]
    order = lambda row: (row["model"], row["technique"], row["dataset"], row["epoch"] or 0, row["attack"])  # noqa: E731
    return {
        "new": sorted((row for k, row in new_rows.items() if k not in old_rows), key=order),
        "moved": sorted(moved, key=lambda m: order(m[2])),
        "gone": sorted((row for k, row in old_rows.items() if k not in new_rows), key=order),
        "ranks": moves(before["ranking"] if before else None, after["ranking"]),
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

    from ..report.row_schema import setting_columns

    mode = os.environ.get("WANDB_MODE") or "offline"
    if mode == "disabled":
        return
    folder = str(Path(folder or ".").resolve())
    run = wandb.init(project=project, name=f"board-{manifest['name']}", job_type="board-release", mode=mode,
                     dir=folder, reinit="finish_previous", settings=wandb.Settings(silent=True))  # fmt: skip
    run.log(
        {
            "board": wandb.Table(
                columns=setting_columns(), data=[[r[c] for c in setting_columns()] for r in settings]
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
