"""Training-time defences, one plugin file each, registered under the file stem in ``DEFENCES``.

A defence (:class:`~privauditor.tasks.defences._base.Defence`) carries its settings
(``defence_params.<name>``, a dataclass), their resolution (every default filled in: what the cell id
hashes), the pairs it cannot train and why, its training hooks, its ``cell.json`` record, its tag in the
cell id and what it adds to a cell's cost. Other installed packages add defences through the
``privauditor.defences`` entry-point group. ``none`` (no defence) is not a plugin.
"""

from __future__ import annotations

from ..infra.errors import PrivauditorError, unknown_name_message
from ..infra.registry import Registry
from ._base import Defence, Guard, TrainingRun, default_delta

DEFENCES: Registry[type[Defence]] = Registry("defence", __name__, group="privauditor.defences")

__all__ = [
    "DEFENCES",
    "Defence",
    "Guard",
    "TrainingRun",
    "check_defence",
    "default_delta",
    "defence_names",
    "get_defence",
]


def defence_names() -> list[str]:
    """``none`` and every registered defence."""
    return ["none", *DEFENCES.names()]


def check_defence(name: str) -> None:
    """A one-line error unless ``name`` is ``none`` or a registered defence."""
    if name != "none" and name not in DEFENCES:
        raise PrivauditorError(unknown_name_message("defence", name, defence_names()))


def get_defence(name: str) -> Defence | None:
    """The defence ``name`` (None for ``none``); unknown names are a one-line error."""
    check_defence(name)
    return None if name == "none" else DEFENCES.get(name)()
