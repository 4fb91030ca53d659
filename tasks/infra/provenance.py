"""Where a cell's numbers came from, recorded in its ``cell.json``: package versions and privauditor's
git revision, the hardware (never the machine's name), and the content hash of an adaptation's files."""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("privauditor", "torch", "transformers", "peft", "datasets", "numpy", "pyarrow", "scikit-learn")


def versions() -> dict[str, str]:
    """Python's and the packages' versions, and privauditor's git revision where it runs from a checkout
    (``+dirty`` with uncommitted changes to tracked files)."""
    found = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    revision = git_revision()
    return found | ({"privauditor_git": revision} if revision else {})


def git_revision() -> str | None:
    import subprocess

    root = Path(__file__).resolve().parents[2]  # the checkout (this file is tasks/infra/provenance.py)
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def hardware(device: str) -> dict[str, Any]:
    """What the numbers ran on, without naming the machine: device, accelerator model, CPU count."""
    import os
    import platform

    import torch

    accelerator = (
        torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else None
    )
    return {"device": device, "accelerator": accelerator, "cpus": os.cpu_count(), "arch": platform.machine()}


#: peft keeps these settings as sets and writes them in the order of the process's string hashing
PEFT_SETS = ("target_modules", "exclude_modules")


def directory_hash(path: Path) -> str:
    """sha256 over the names and bytes of the files under ``path`` (the adaptation's content hash). A peft
    ``adapter_config.json`` counts by its settings, its :data:`PEFT_SETS` sorted: the same adapter saved by
    two processes hashes alike."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        data = file.read_bytes()
        if file.name == "adapter_config.json":
            data = _settings_bytes(data)
        digest.update(str(file.relative_to(path)).encode() + b"\x00" + data)
    return digest.hexdigest()


def _settings_bytes(data: bytes) -> bytes:
    """A peft config in one byte form: sorted keys, its set-valued settings sorted."""
    try:
        config = json.loads(data)
    except ValueError:
        return data
    if not isinstance(config, dict):
        return data
    for key in PEFT_SETS:
        if isinstance(config.get(key), list) and all(isinstance(v, str) for v in config[key]):
            config[key] = sorted(config[key])
    return json.dumps(config, sort_keys=True).encode()
