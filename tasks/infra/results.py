"""The results folder, which this module alone lays out: local or on an object store, one interface.

``OUT/privauditor.json`` names the results format (a folder of another format is refused) and the run's
id. Each cell (or audit) lives in ``OUT/cells/<cell_id>/``: :class:`CellFolder` says whether it finished
(``DONE``), clears a half-written attempt, and finishes it by writing ``cell.json`` then ``DONE``, each
atomically, so a folder with ``DONE`` is whole and one without is redone. The last checkpoint's audit
is the folder's own files; an earlier one's lives under :func:`checkpoint_path`. ``cell.json`` is a
:class:`~privauditor.tasks.infra.records.CellRecord`.

``--out results/x`` (or a shared mount such as ``/mnt/results/x``) is written in place. ``--out
s3://bucket/prefix`` (any URI that ``pyarrow.fs.FileSystem.from_uri`` opens: ``s3://``, ``gs://``,
``hdfs://``, ``file://``) is written through ``pyarrow.fs``: a cell runs in a local stage folder (under
the artefact cache, one per results URI and node) and, once finished, each of its files is uploaded in one
piece and ``DONE`` last, so a reader never sees a cell without all its files (the stage then keeps only
the cell's summaries). Work cells share (``shared/``) stays in the node's stage: done once per node. The
leaderboard is built from the finished cells' ``cell.json`` / ``metrics.json`` (and ROC images) fetched
into the stage, then uploaded file by file.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from .cache import cache_root, stable_hash
from .errors import PrivauditorError, one_line
from .files import atomic_write, write_json
from .records import CellOutcome, CellRecord, CheckpointRecord

# 2: the typed spec (data, weights and version identities in the cell id), split parts, views
# 3: checkpoints (one audit per snapshot; earlier ones under checkpoints/epoch-<e>/)
# 4: checkpoints named by step (checkpoints/step-<s>/; epochs may be fractions); tpr at FPR < target
RESULTS_FORMAT = 5  # 5: signal stores of format 2

#: the folder of every cell (and audit) in a results folder
CELLS = "cells"
#: what a leaderboard needs of each finished cell
SUMMARY_FILES = ("DONE", "cell.json", "metrics.json")
#: a cell folder's training state kept from a preempted attempt for the next (not a result: never uploaded)
RESUME = ".resume"
LEADERBOARD_FILES = tuple(f"leaderboard.{s}" for s in ("parquet", "csv", "md", "html"))


def is_uri(out: str | Path) -> bool:
    return "://" in str(out)


class Results:
    """A results folder: ``root`` is where this process reads and writes (a local folder, or the stage of
    an object store's copy, mirrored to ``remote_root`` on ``fs``). It alone knows the layout: the marker,
    ``cells/<cell_id>/`` (each a :class:`CellFolder`), the finished cells, the summaries a leaderboard
    reads, the leaderboard files and ROC images; ``tests/test_imports.py`` fails on a path to ``cells/``
    built anywhere else."""

    def __init__(
        self, root: str | Path, uri: str | None = None, fs: Any = None, remote_root: str = ""
    ) -> None:
        self.root, self.fs, self.remote_root = Path(root), fs, remote_root
        self.uri = uri if uri is not None else str(self.root)

    @classmethod
    def at(cls, out: str | Path) -> Results:
        """The results at ``out``: a folder (made absolute: trials run in other working directories) or a
        ``pyarrow.fs`` URI (a one-line error if it cannot be opened)."""
        if not is_uri(out):
            return cls(Path(out).resolve())
        from pyarrow import fs as pafs

        try:
            filesystem, root = pafs.FileSystem.from_uri(str(out))
        except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise PrivauditorError(f"cannot open results {out}: {one_line(exc)}") from None
        stage = cache_root() / "stage" / stable_hash(str(out), 16)
        return cls(stage, str(out), filesystem, root.rstrip("/"))

    @classmethod
    def open_for_writing(
        cls, out: str | Path, writer: dict[str, str] | None = None, add: bool = False
    ) -> Results:
        """The results at ``out``, ready for a run: the marker checked (an object store's decides, as a
        folder's does) or created, the ``writer`` claimed (:func:`claim`), and the temporary files of a run
        that was killed removed."""
        results = cls.at(out)
        results.fetch("privauditor.json")
        check_results_dir(results.root, writer)
        if writer is not None:
            claim(results.root, writer, add, results.uri)
        results.upload("privauditor.json")
        for folder in (results.root, results.root / "plots", results.root / "plots" / "privacy_utility"):
            for stale in folder.glob(".*.tmp-*"):  # being written when a run was killed
                stale.unlink()
        return results

    @property
    def remote(self) -> bool:
        return self.fs is not None

    @property
    def cells_dir(self) -> Path:
        return self.root / CELLS

    def cell(self, cell_id: str) -> CellFolder:
        return CellFolder(self.root, cell_id)

    def cell_ids(self, finished: bool = True) -> list[str]:
        """The ids of the cells here (with ``finished``, those with ``DONE``), sorted."""
        if not self.cells_dir.is_dir():
            return []
        found = sorted(p.name for p in self.cells_dir.iterdir() if p.is_dir())
        return [c for c in found if self.cell(c).done] if finished else found

    def folders(self, finished: bool = True) -> list[CellFolder]:
        """:meth:`cell_ids` as folders."""
        return [self.cell(c) for c in self.cell_ids(finished)]

    @staticmethod
    def relative(cell_id: str, *parts: str) -> str:
        """A cell's file as a POSIX path relative to the results folder (an object store's key)."""
        return "/".join([CELLS, cell_id, *parts])

    @staticmethod
    def roc_key(cell_id: str) -> str:
        """A cell's ROC image relative to the results folder (beside the leaderboard, under ``plots/``)."""
        return f"plots/{cell_id}.png"

    def roc_image(self, cell_id: str) -> Path:
        return self.root / self.roc_key(cell_id)

    def done(self, cell_id: str) -> bool:
        """The cell finished (its ``DONE`` is there, on the object store for a remote folder)."""
        if not self.remote:
            return self.cell(cell_id).done
        return self._exists(self.relative(cell_id, "DONE"))

    def check_readable(self) -> None:
        """A one-line error unless this is a results folder privauditor wrote (a local one has ``cells/``;
        each has ``privauditor.json``) of this results format; the marker is read, never written."""
        if not self.remote and not self.cells_dir.is_dir():
            raise PrivauditorError(f"{self.uri} is not a results folder (no cells/ inside)")
        if not self.fetch("privauditor.json"):
            raise PrivauditorError(
                f"{self.uri} has no privauditor.json: privauditor did not write this folder"
            )
        check_results_format(self.root, self.uri)

    # -- an object store's copy: no-ops for a local folder -------------------------------------------------

    def _exists(self, relative: str) -> bool:
        from pyarrow import fs as pafs

        return self.fs.get_file_info(f"{self.remote_root}/{relative}").type != pafs.FileType.NotFound

    def upload(self, relative: str) -> None:
        """One file of the stage to the same place on the object store, in one piece."""
        if not self.remote:
            return
        target = f"{self.remote_root}/{relative}"
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        with open(self.root / relative, "rb") as source, self.fs.open_output_stream(target) as sink:
            shutil.copyfileobj(source, sink, 1 << 22)

    def download(self, relative: str) -> None:
        def copy(tmp: Path) -> None:
            with (
                self.fs.open_input_stream(f"{self.remote_root}/{relative}") as source,
                open(tmp, "wb") as sink,
            ):
                shutil.copyfileobj(source, sink, 1 << 22)

        atomic_write(self.root / relative, copy)

    def fetch(self, relative: str) -> bool:
        """Copy one file from the object store into the stage if it is there; whether it was."""
        if not self.remote:
            return (self.root / relative).exists()
        if not self._exists(relative):
            return False
        self.download(relative)
        return True

    def push_cell(self, cell_id: str) -> None:
        """Upload a finished cell: every file, then ``DONE`` (an interrupted upload leaves no ``DONE``);
        the stage keeps what a leaderboard reads."""
        if not self.remote:
            return
        folder = self.cell(cell_id).path
        files = sorted(p.relative_to(self.root).as_posix() for p in folder.rglob("*") if p.is_file())
        for relative in [f for f in files if not f.endswith("/DONE")] + [self.relative(cell_id, "DONE")]:
            self.upload(relative)
        keep = {folder / name for name in SUMMARY_FILES} | set(folder.glob("checkpoints/*/metrics.json"))
        for path in sorted(folder.rglob("*"), reverse=True):
            if path.is_file() and path not in keep:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()

    def pull_summaries(self) -> None:
        """Fetch what the leaderboard reads of every finished cell (and its ROC image) into the stage."""
        if not self.remote:
            return
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(f"{self.remote_root}/{CELLS}", allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            cell_id = info.base_name
            if info.type != pafs.FileType.Directory or not self._exists(self.relative(cell_id, "DONE")):
                continue
            cell = self.cell(cell_id)
            for name in SUMMARY_FILES:
                if not (cell.path / name).exists():
                    self.download(self.relative(cell_id, name))
            for checkpoint in cell.record().get("checkpoints", []):  # earlier checkpoints' metrics
                relative = self.relative(cell_id, checkpoint["path"], "metrics.json")
                if checkpoint["path"] != "." and not (self.root / relative).exists():
                    self.download(relative)
            image = self.roc_key(cell_id)
            if self._exists(image) and not (self.root / image).exists():
                self.download(image)

    def push_leaderboard(self) -> None:
        for name in LEADERBOARD_FILES:
            self.upload(name)


class CellFolder:
    """``OUT/cells/<cell_id>/`` through its lifecycle (:attr:`done`, :meth:`start`, :meth:`finish`) and
    what a finished one holds (:meth:`record`, :meth:`metrics`, :meth:`checkpoints`)."""

    def __init__(self, out: Path, cell_id: str) -> None:
        self.out, self.cell_id = Path(out), cell_id
        self.path = self.out / CELLS / cell_id

    @classmethod
    def at(cls, path: str | Path) -> CellFolder:
        """The cell folder ``path`` (``OUT/cells/<cell_id>``)."""
        path = Path(path)
        return cls(path.parent.parent, path.name)

    @property
    def done(self) -> bool:
        return (self.path / "DONE").exists()

    @property
    def has_record(self) -> bool:
        return (self.path / "cell.json").exists()

    def record(self) -> CellRecord:
        """Its ``cell.json``."""
        return json.loads((self.path / "cell.json").read_text())

    def metrics(self, checkpoint: str = ".") -> dict[str, Any]:
        """The ``metrics.json`` of a checkpoint's audit (``checkpoint``: its ``path`` in the record; the
        folder's own, the last checkpoint's, by default)."""
        return json.loads((self.path / checkpoint / "metrics.json").read_text())

    def checkpoints(self, shipped: bool = False) -> list[tuple[CheckpointRecord, dict[str, Any]]]:
        """(checkpoint record, metrics by attack) pairs, in step order; with ``shipped``, the last
        checkpoint's shipped forms after them (those audited, in ``score.shipped``'s order)."""
        return checkpoint_results(self.path, shipped)

    def finished(self) -> str:
        """When it finished (``DONE``'s time; "" for a folder written before it was recorded)."""
        return json.loads((self.path / "DONE").read_text()).get("finished", "")

    def done_written(self) -> float:
        """When ``DONE`` was written (its modification time, seconds since the epoch)."""
        return (self.path / "DONE").stat().st_mtime

    def mark_interrupted(self) -> bool:
        """Leave ``INTERRUPTED`` in a cell stopped part-way (if its folder exists); whether it did."""
        if not self.path.is_dir():
            return False
        write_json(self.path / "INTERRUPTED", {"cell_id": self.cell_id})
        return True

    def outcome(self, skipped: bool, warnings: tuple[str, ...] = ()) -> CellOutcome:
        """The finished cell's outcome (its last checkpoint's metrics)."""
        metrics = json.loads((self.path / "metrics.json").read_text())
        return CellOutcome(self.cell_id, self.path, metrics, skipped, warnings)

    @property
    def resume_dir(self) -> Path:
        """Where a preempted attempt left its training's step state (:mod:`privauditor.tasks.training.resume`)."""
        return self.path / RESUME

    def start(self) -> Path:
        """Check the results folder (creating its marker), clear an unfinished earlier attempt and create
        the cell folder empty but for a preempted attempt's :attr:`resume_dir`, which the next attempt
        resumes from (the cell removes it before it finishes)."""
        check_results_dir(self.out)
        if self.resume_dir.is_dir():
            for path in self.path.iterdir():
                if path.is_dir() and path != self.resume_dir:
                    shutil.rmtree(path)
                elif not path.is_dir():
                    path.unlink()
        else:
            shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def finish(self, record: CellRecord) -> None:
        """Write ``cell.json``, then ``DONE`` (with the finishing time)."""
        write_json(self.path / "cell.json", record)
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json(self.path / "DONE", {"cell_id": self.cell_id, "finished": finished})


def _results_format(marker: Path) -> Any:
    try:
        return json.loads(marker.read_text()).get("results_format")
    except (json.JSONDecodeError, AttributeError):
        return "unreadable"


def check_results_format(folder: Path, name: str | None = None) -> None:
    """Refuse a folder whose ``privauditor.json`` names another results format (read, never written: a
    folder without one is left as it is); the error names it ``name`` (its URI, for a stage) or its path."""
    marker = folder / "privauditor.json"
    if marker.exists() and (found := _results_format(marker)) != RESULTS_FORMAT:
        raise PrivauditorError(
            f"{name or folder} holds results format {found!r}, this privauditor reads {RESULTS_FORMAT}: "
            "read it with the privauditor that wrote it"
        )


def check_results_dir(out: Path, writer: dict[str, str] | None = None) -> None:
    """Create ``out/privauditor.json`` or check it: a folder of another results format is refused. A new
    marker names its ``writer`` (:func:`claim`)."""
    marker = out / "privauditor.json"
    if marker.exists():
        if (found := _results_format(marker)) != RESULTS_FORMAT:
            raise PrivauditorError(
                f"{out} holds results format {found!r}, this privauditor writes {RESULTS_FORMAT}: "
                "use another --out folder"
            )
        return
    if out.exists() and not out.is_dir():
        raise PrivauditorError(f"results folder {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        # run_id: this folder's identity on a board (a rerun elsewhere is another run)
        written = {"written_by": [writer]} if writer else {}
        write_json(marker, {"results_format": RESULTS_FORMAT, "run_id": uuid.uuid4().hex} | written)
    except OSError as exc:
        raise PrivauditorError(f"cannot write results to {out}: {exc.strerror or exc}") from None


#: what a writer of each kind is called in an error
KINDS = {"sweep": "a sweep's cells", "cell": "cells run one at a time (privauditor cell)", "audit": "audits"}


def claim(out: Path, writer: dict[str, str], add: bool = False, name: str | None = None) -> None:
    """Record ``writer`` (``{"kind": "sweep", "sweep": NAME, "spec": HASH}``, ``{"kind": "cell"}`` or
    ``{"kind": "audit"}``) in ``out``'s marker, or refuse in one line a writer that would mix with what the
    folder holds: another kind, or a sweep of another name or settings (``add`` keeps a second sweep spec on
    purpose). A marker of an earlier release, which names no writer, is left as it is."""
    marker = out / "privauditor.json"
    data = json.loads(marker.read_text())
    if "written_by" not in data or writer in data["written_by"]:
        return
    where, held = name or str(out), data["written_by"]
    if writer["kind"] != held[0]["kind"]:
        raise PrivauditorError(
            f"{where} holds {KINDS[held[0]['kind']]}; {KINDS[writer['kind']]} go to a folder of their own "
            "(another --out)"
        )
    if writer["kind"] == "sweep" and not add:
        old = held[-1]
        raise PrivauditorError(
            f"{where} holds sweep {old['sweep']!r} (settings {old['spec']}), not {writer['sweep']!r} with "
            f"settings {writer['spec']}: use another --out, or --add-spec to keep both in this folder"
        )
    if writer["kind"] == "sweep":
        write_json(marker, data | {"written_by": [*held, writer]})


def checkpoint_results(
    cell_dir: Path, shipped: bool = False
) -> list[tuple[CheckpointRecord, dict[str, Any]]]:
    """A finished cell's (checkpoint record, metrics by attack) pairs, in step order, then (``shipped``)
    its audited shipped forms'."""
    record = json.loads((Path(cell_dir) / "cell.json").read_text())
    audited = [*record["checkpoints"], *(s for s in record.get("shipped", []) if shipped and "path" in s)]
    return [
        (checkpoint, json.loads((Path(cell_dir) / checkpoint["path"] / "metrics.json").read_text()))
        for checkpoint in audited
    ]


def checkpoint_path(step: int) -> str:
    """Where an earlier checkpoint's audit lives in its cell's folder (the last one's is the folder)."""
    return f"checkpoints/step-{step}"
