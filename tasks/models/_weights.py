"""A checkpoint folder's identity: the sha256 of its weight files, hashed once per process while the
files are unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..infra.errors import PrivauditorError

#: weight files whose bytes identify a checkpoint
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")

_HASHES: dict[tuple, str] = {}


def checkpoint_identity(folder: Path) -> str:
    """``sha256:<hex>`` over the names and bytes of a checkpoint folder's weight files."""
    files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        raise PrivauditorError(f"model directory {folder} has no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    stats = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    key = (str(folder.resolve()), stats)
    if key not in _HASHES:
        digest = hashlib.sha256()
        for file in files:
            digest.update(file.name.encode() + b"\x00")
            with open(file, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    digest.update(chunk)
        _HASHES[key] = f"sha256:{digest.hexdigest()}"
    return _HASHES[key]
