"""The artefact cache: tiny bases, tokenizer, masked LM and corpus, built once and reused.

Each artefact lives in ``<cache root>/<kind>/<name>-<key>/`` where ``key`` hashes everything the
artefact's content depends on (its config, its inputs' hashes and an artefact format version) — not the
code version, so a commit that does not change an artefact does not rebuild it. Builds write into a
temporary sibling directory and rename it into place, under a file lock, so concurrent workers (Ray
trials starting together) build each artefact once and never see a half-written one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import PrivauditorError

CACHE_ENV = "PRIVAUDITOR_CACHE"


def cache_root() -> Path:
    """``$PRIVAUDITOR_CACHE``, else ``$XDG_CACHE_HOME/privauditor``, else ``~/.cache/privauditor``."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV]).expanduser()
        if root.exists() and not root.is_dir():
            raise PrivauditorError(f"${CACHE_ENV}={root} is a file: the artefact cache is a folder")
        return root
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "privauditor"


def stable_hash(obj: Any, length: int = 12) -> str:
    """Hex sha256 of the canonical JSON of ``obj`` (sorted keys), cut to ``length`` characters."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing), released on exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_dir(kind: str, name: str, key_material: Any, build: Callable[[Path], None] | None) -> Path | None:
    """The cache directory for an artefact, calling ``build(tmp_dir)`` first if it does not exist
    (with ``build`` None, a missing artefact gives None: a look, not a build).

    ``build`` fills a fresh temporary directory; it is renamed into place only after it returns, and a
    ``key.json`` beside the files records what the key was computed from.
    """
    final = cache_root() / kind / f"{name}-{stable_hash(key_material)}"
    if (final / "key.json").exists():
        return final
    if build is None:
        return None
    with file_lock(final.with_name(final.name + ".lock")):
        if (final / "key.json").exists():  # built by another process while we waited
            return final
        tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            build(tmp)
            (tmp / "key.json").write_text(json.dumps(key_material, indent=2, sort_keys=True, default=str))
            shutil.rmtree(final, ignore_errors=True)  # a leftover without key.json is incomplete
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
