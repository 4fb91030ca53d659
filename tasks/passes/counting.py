"""Counting forward passes: how many texts went through which model, for ``benchmarks/sweep_scaling.py``.

A :class:`ForwardCounter` hooks every module globally (``torch.nn.modules.module`` global hooks, meant
for profiling) and counts each *outermost* call of a model (a transformers ``PreTrainedModel`` or a peft
wrapper; the models nested inside it are the same pass), with the rows of its batch taken from the
output (``logits`` or ``last_hidden_state``) and a mode: ``train`` (the model is in training mode),
``grad`` (eval mode, gradients on: GradNorm) or ``infer``. Setting ``PRIVAUDITOR_COUNT_FORWARD=FILE``
makes every process that runs a cell append one line per pass to ``FILE`` (``class<TAB>mode<TAB>rows``),
so passes made inside Ray workers are counted too. Off by default: the hooks cost a few microseconds a
module call.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

ENV = "PRIVAUDITOR_COUNT_FORWARD"


def _is_model(module: Any) -> bool:
    from transformers import PreTrainedModel  # already imported wherever a model runs

    return isinstance(module, PreTrainedModel) or type(module).__module__.startswith("peft.")


def _rows(output: Any) -> int:
    for name in ("logits", "last_hidden_state"):
        tensor = getattr(output, name, None)
        if tensor is not None:
            return int(tensor.shape[0])
    return 0


class ForwardCounter:
    """Counts outermost model calls (``passes``) and their batch rows (``rows``) by (class, mode)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.passes: Counter[tuple[str, str]] = Counter()
        self.rows: Counter[tuple[str, str]] = Counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: list[Any] = []

    def __enter__(self) -> ForwardCounter:
        from torch.nn.modules import module

        self._handles = [
            module.register_module_forward_pre_hook(self._enter),
            module.register_module_forward_hook(self._leave, always_call=True),
        ]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def total(self, mode: str | None = None, rows: bool = True) -> int:
        counts = self.rows if rows else self.passes
        return sum(n for (_, m), n in counts.items() if mode is None or m == mode)

    def _enter(self, module: Any, args: Any) -> None:
        if _is_model(module):
            self._local.depth = getattr(self._local, "depth", 0) + 1

    def _leave(self, module: Any, args: Any, output: Any) -> None:
        if not _is_model(module):
            return
        self._local.depth -= 1
        if self._local.depth:
            return
        import torch

        mode = "train" if module.training else ("grad" if torch.is_grad_enabled() else "infer")
        key, rows = (type(module).__name__, mode), _rows(output)
        with self._lock:
            self.passes[key] += 1
            self.rows[key] += rows
        if self.path is not None:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{key[0]}\t{mode}\t{rows}\n".encode())
            finally:
                os.close(fd)


_from_env: ForwardCounter | None = None


def install_from_env() -> None:
    """Start counting into ``$PRIVAUDITOR_COUNT_FORWARD`` in this process (once), if it is set."""
    global _from_env
    path = os.environ.get(ENV)
    if path and _from_env is None:
        _from_env = ForwardCounter(Path(path)).__enter__()


def read_counts(path: Path) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """(passes, rows) by (class, mode) from a ``$PRIVAUDITOR_COUNT_FORWARD`` file."""
    passes: Counter[tuple[str, str]] = Counter()
    rows: Counter[tuple[str, str]] = Counter()
    if Path(path).exists():
        for line in Path(path).read_text().splitlines():
            name, mode, n = line.split("\t")
            passes[name, mode] += 1
            rows[name, mode] += int(n)
    return passes, rows
