"""The results store: a folder (e.g. a git working tree) or any ``pyarrow.fs`` URI of immutable files.

```
STORE/
  board.json                          {"board_format": 1}
  records/<key>/<content hash>.json   one record (canonical JSON); one file per key unless two writers raced
  releases/<name>.json                a release manifest
```

Nothing is ever overwritten or deleted. In a local folder, adds hold an exclusive lock on the store
folder while they compare and write, so a record whose key is already there with other bytes is refused
at write time, and concurrent adds of different results both land. Object stores have no create-if-
absent: two writers of one key with different bytes leave two files under ``records/<key>/``, which
``board check`` reports as a conflict. Files are written whole (a hidden temporary name renamed into
place, or one upload), and names starting with ``.`` are never read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.errors import PrivauditorError

BOARD_FORMAT = 1
MARKER = "board.json"


class Store:
    def __init__(self, location: str | Path, create: bool = False) -> None:
        self.uri = str(location)
        if "://" in self.uri:
            from pyarrow import fs as pafs

            try:
                self.fs, root = pafs.FileSystem.from_uri(self.uri)
            except (ValueError, OSError) as exc:
                raise PrivauditorError(f"cannot open store {self.uri}: {exc}") from None
            self.root, self.local = root.rstrip("/"), None
        else:
            self.fs, self.local = None, Path(location).resolve()
            self.root = str(self.local)
        self._check(create)

    def _check(self, create: bool) -> None:
        if self.local is not None and self.local.exists() and not self.local.is_dir():
            raise PrivauditorError(f"store {self.uri} is a file, not a folder")
        if self.exists(MARKER):
            try:
                found = json.loads(self.read(MARKER)).get("board_format")
            except (json.JSONDecodeError, AttributeError):
                found = "unreadable"
            if found != BOARD_FORMAT:
                raise PrivauditorError(
                    f"store {self.uri} holds board format {found!r}, this privauditor reads {BOARD_FORMAT}"
                )
            return
        if not create:
            raise PrivauditorError(
                f"{self.uri} is not a board store (no {MARKER}): `privauditor board add` makes one"
            )
        if self.local is not None and any(
            (self.local / name).exists() for name in ("cells", "privauditor.json")
        ):
            raise PrivauditorError(
                f"store {self.uri} is a results folder: give a new or empty folder for the store"
            )
        self.write_new(MARKER, (json.dumps({"board_format": BOARD_FORMAT}) + "\n").encode(), exist_ok=True)

    def exists(self, relative: str) -> bool:
        if self.local is not None:
            return (self.local / relative).exists()
        from pyarrow import fs as pafs

        return self.fs.get_file_info(f"{self.root}/{relative}").type != pafs.FileType.NotFound

    def read(self, relative: str) -> bytes:
        if self.local is not None:
            return (self.local / relative).read_bytes()
        with self.fs.open_input_stream(f"{self.root}/{relative}") as source:
            return source.read()

    def list(self, folder: str) -> list[str]:
        """Every file under ``folder`` (relative to the store, sorted), hidden names left out."""
        if self.local is not None:
            base = self.local / folder
            found = (
                [p.relative_to(self.local).as_posix() for p in base.rglob("*") if p.is_file()]
                if base.is_dir()
                else []
            )
        else:
            from pyarrow import fs as pafs

            selector = pafs.FileSelector(f"{self.root}/{folder}", recursive=True, allow_not_found=True)
            infos = self.fs.get_file_info(selector)
            found = [i.path[len(self.root) + 1 :] for i in infos if i.type == pafs.FileType.File]
        return sorted(f for f in found if not any(part.startswith(".") for part in f.split("/")))

    def write_new(self, relative: str, data: bytes, exist_ok: bool = False) -> bool:
        """Create ``relative`` with ``data``; False (nothing written) when it is already there. A local
        file appears whole (hard-linked from a temporary file, which fails if the name exists)."""
        if self.local is None:
            if self.exists(relative):
                return False
            target = f"{self.root}/{relative}"
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(target) as sink:
                sink.write(data)
            return True
        path = self.local / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            tmp.write_bytes(data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: exclusive creation, then the bytes
                with open(path, "xb") as sink:
                    sink.write(data)
        except FileExistsError:
            return exist_ok
        finally:
            tmp.unlink(missing_ok=True)
        return True

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive while held, across processes, for a local store; nothing for an object store."""
        if self.local is None:
            yield
            return
        descriptor = os.open(self.local, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def records(self) -> dict[str, list[str]]:
        """Record files by key (``records/<key>/<hash>.json``); a key with two files is a conflict."""
        found: dict[str, list[str]] = {}
        for path in self.list("records"):
            parts = path.split("/")
            key = parts[1] if len(parts) == 3 else path  # a stray file is its own (invalid) entry
            found.setdefault(key, []).append(path)
        return found

    def load(self, path: str) -> Any:
        try:
            return json.loads(self.read(path))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return f"not JSON ({exc})"
