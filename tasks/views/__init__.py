"""Views: the inputs attacks read, one plugin file each, registered under the file stem in ``VIEWS``.

A view is one kind of input (the target's per-token signals, the reference model's, neighbour texts'
scores, per-sample gradient norms, ...) with its own parameters. It computes itself from a
:class:`~privauditor.tasks.views._base.ViewContext`, is stored once under a key of everything it depends
on, and states its cost in passes per text. An attack declares the views it needs (``Attack.views``);
the cell computes each distinct view once, so two attacks asking for the same view share it, and two
asking with other parameters each get their own.
"""

from ..infra.registry import Registry
from ._base import Cost, View

VIEWS: Registry[type[View]] = Registry("view", __name__, group="privauditor.views")

__all__ = ["VIEWS", "Cost", "View", "build_view"]


def build_view(name: str, params: dict | None = None) -> View:
    """The view ``name`` with parameter overrides; unknown fields are a one-line error."""
    return VIEWS.build(name, params)
