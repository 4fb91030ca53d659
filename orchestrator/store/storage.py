"""Where a sweep's results live: a local (or shared, POSIX-mounted) folder, or an object store.

``--out results/x`` (or a shared mount such as ``/mnt/results/x``) is written in place: every file to
a temporary name and renamed, ``DONE`` last. ``--out s3://bucket/prefix`` (any URI that
``pyarrow.fs.FileSystem.from_uri`` opens: ``s3://``, ``gs://``, ``hdfs://``, ``file://``) is written
through ``pyarrow.fs``: a cell runs in a local stage folder (under the artefact cache, one per results
URI and node) and, once finished, each of its files is uploaded in one piece and ``DONE`` last, so a
reader never sees a cell without all its files (the stage then keeps only the cell's summaries). Work cells share (``shared/``) stays in the node's stage:
done once per node. The leaderboard is built from the finished cells' ``cell.json`` / ``metrics.json``
(and ROC images) fetched into the stage, then uploaded file by file.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.cache import cache_root, stable_hash
from privauditor.tasks.infra.errors import PrivauditorError, one_line
from privauditor.tasks.infra.files import atomic_write
from privauditor.tasks.infra.results import CELLS, ResultsFolder

#: what a leaderboard needs of each finished cell
SUMMARY_FILES = ("DONE", "cell.json", "metrics.json")
LEADERBOARD_FILES = tuple(f"leaderboard.{s}" for s in ("parquet", "csv", "md", "html"))


def is_uri(out: str | Path) -> bool:
    return "://" in str(out)


@dataclass(frozen=True)
class Results:
    """A results folder: ``local`` is where this process reads and writes; with ``fs`` set, the files
    are mirrored to ``root`` on that filesystem."""

    uri: str
    local: Path
    fs: Any = None
    root: str = ""

    @classmethod
    def at(cls, out: str | Path) -> Results:
        if not is_uri(out):
            local = Path(out).resolve()  # absolute: trials run in other working directories
            return cls(str(local), local)
        from pyarrow import fs as pafs

        try:
            filesystem, root = pafs.FileSystem.from_uri(str(out))
        except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise PrivauditorError(f"cannot open results {out}: {one_line(exc)}") from None
        stage = cache_root() / "stage" / stable_hash(str(out), 16)
        return cls(str(out), stage, filesystem, root.rstrip("/"))

    @property
    def remote(self) -> bool:
        return self.fs is not None

    def _exists(self, relative: str) -> bool:
        from pyarrow import fs as pafs

        return self.fs.get_file_info(f"{self.root}/{relative}").type != pafs.FileType.NotFound

    def done(self, cell_id: str) -> bool:
        """The cell finished (its ``DONE`` is there)."""
        if not self.remote:
            return ResultsFolder(self.local).cell(cell_id).done
        return self._exists(ResultsFolder.relative(cell_id, "DONE"))

    def upload(self, relative: str) -> None:
        """One local file of the stage to the same place on the filesystem, in one piece."""
        if not self.remote:
            return
        target = f"{self.root}/{relative}"
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        with open(self.local / relative, "rb") as source, self.fs.open_output_stream(target) as sink:
            shutil.copyfileobj(source, sink, 1 << 22)

    def download(self, relative: str) -> None:
        def copy(tmp: Path) -> None:
            with self.fs.open_input_stream(f"{self.root}/{relative}") as source, open(tmp, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 22)

        atomic_write(self.local / relative, copy)

    def push_cell(self, cell_id: str) -> None:
        """Upload a finished cell: every file, then ``DONE`` (an interrupted upload leaves no ``DONE``)."""
        if not self.remote:
            return
        folder = ResultsFolder(self.local).cell(cell_id).path
        files = sorted(p.relative_to(self.local).as_posix() for p in folder.rglob("*") if p.is_file())
        for relative in [f for f in files if not f.endswith("/DONE")] + [
            ResultsFolder.relative(cell_id, "DONE")
        ]:
            self.upload(relative)
        keep = {folder / name for name in SUMMARY_FILES} | set(folder.glob("checkpoints/*/metrics.json"))
        for path in sorted(folder.rglob("*"), reverse=True):  # the stage keeps what a leaderboard reads
            if path.is_file() and path not in keep:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()

    def pull_summaries(self) -> None:
        """Fetch what the leaderboard reads of every finished cell (and its ROC image) into the stage."""
        if not self.remote:
            return
        from pyarrow import fs as pafs

        listing = self.fs.get_file_info(pafs.FileSelector(f"{self.root}/{CELLS}", allow_not_found=True))
        for info in listing:
            cell_id = info.base_name
            if info.type != pafs.FileType.Directory or not self._exists(
                ResultsFolder.relative(cell_id, "DONE")
            ):
                continue
            cell = ResultsFolder(self.local).cell(cell_id)
            for name in SUMMARY_FILES:
                if not (cell.path / name).exists():
                    self.download(ResultsFolder.relative(cell_id, name))
            for checkpoint in cell.record().get("checkpoints", []):  # earlier checkpoints' metrics
                relative = ResultsFolder.relative(cell_id, checkpoint["path"], "metrics.json")
                if checkpoint["path"] != "." and not (self.local / relative).exists():
                    self.download(relative)
            if (
                self._exists(f"plots/{cell_id}.png")
                and not (self.local / "plots" / f"{cell_id}.png").exists()
            ):
                self.download(f"plots/{cell_id}.png")

    def push_leaderboard(self) -> None:
        for name in LEADERBOARD_FILES:
            self.upload(name)

    def check_readable(self) -> None:
        """A one-line error unless this is a results folder (a local one has ``cells/``) of this results
        format; its ``privauditor.json`` is read, never written (a folder without one is left as it is)."""
        from privauditor.tasks.infra.results import check_results_format

        if not self.remote and not ResultsFolder(self.local).cells_dir.is_dir():
            raise PrivauditorError(f"{self.uri} is not a results folder (no cells/ inside)")
        if self.fetch("privauditor.json"):
            check_results_format(self.local, self.uri)

    def fetch(self, relative: str) -> bool:
        """Copy one file from the filesystem into the stage if it is there; whether it was."""
        if not self.remote:
            return (self.local / relative).exists()
        if not self._exists(relative):
            return False
        self.download(relative)
        return True
