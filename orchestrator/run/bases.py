"""Offline models a sweep needs, built once before its trials start: one Ray task each.

A cell's id hashes the weights of its base (and of any model a view uses, such as the masked LM that
makes neighbour texts), so those must exist before the sweep can tell which cells are done. Each missing
one is built by one Ray task with one torch thread (two builds share the cores), not by racing trials;
a warm cache starts no task at all.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privauditor.tasks.infra.progress import PERIOD, read_folder


def missing(specs: Sequence[Any]) -> dict[tuple[str, str, tuple], str]:
    """What is not built yet for ``specs`` (resolved without building), each once, with a name to show:
    ``("model", name, ())`` for a base or reference model, ``("view", name, params)`` for the auxiliary
    models of a view (e.g. the masked LM of ``neighbours``)."""
    found: dict[tuple[str, str, tuple], str] = {}
    for spec in specs:
        if spec.base is None:
            found[("model", spec.model, ())] = spec.model
        if spec.reference is not None and spec.reference_weights is None:
            found[("model", spec.reference, ())] = spec.reference
        for attack in spec.attacks:
            for view in attack.views.values():
                unbuilt = [k for k, v in view.identity.items() if v is None]
                if unbuilt:
                    item = ("view", view.name, tuple(sorted(view.params.items())))
                    found[item] = f"{', '.join(unbuilt)} (of view {view.name})"
    return found


def _build(kind: str, name: str, params: tuple, progress: str) -> str:
    """A Ray task (1 CPU): build one offline model, with one torch thread, its progress into ``progress``."""
    import torch

    from privauditor.tasks.infra.progress import to_folder

    torch.set_num_threads(1)
    to_folder(progress)
    try:
        if kind == "model":
            from privauditor.tasks.models import weights_identity

            return str(weights_identity(name))
        from privauditor.tasks.views import build_view

        return str(build_view(name, dict(params)).identity(build=True))
    finally:  # the worker may run other tasks later: they print, as by default
        to_folder(None)


def build(items: dict[tuple[str, str, tuple], str]) -> None:
    """Build every item of :func:`missing` as a Ray task, in parallel; a line before and one after."""
    import ray

    started = time.perf_counter()
    print(
        f"building offline models: {', '.join(sorted(set(items.values())))} (cached for later runs)",
        flush=True,
    )
    task = ray.remote(_build)
    with tempfile.TemporaryDirectory() as progress:  # each task's latest state, printed every PERIOD s
        built = [task.remote(*item, progress) for item in items]
        waiting = built
        while waiting:
            _, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=PERIOD)
            for text in read_folder(Path(progress)) if waiting else []:
                print(f"  {text}", flush=True)
        ray.get(built)  # a task's error, raised here
    print(f"offline models ready in {time.perf_counter() - started:.0f} s", flush=True)
