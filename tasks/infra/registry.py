"""Name → plugin registries, filled by decorators where each plugin is defined.

A registry knows the package that holds its plugins; the first lookup imports every module of that
package (``pkgutil``), so adding a plugin is adding one file, and nothing central is edited. Plugins may
also come from other installed packages: the first lookup also loads the entry points of the registry's
group (``privauditor.attacks``, ``privauditor.views``, ``privauditor.adaptations``,
``privauditor.datasets``, ``privauditor.defences``, ``privauditor.models`` for model families), each
naming a module whose decorators register its plugins, exactly as a file of the plugin package does. Unknown names get an error
that lists the known names and the closest match, as lm-evaluation-harness does.

Example::

    ATTACKS = Registry("attack", "privauditor.tasks.attacks", group="privauditor.attacks")

and, in another package's ``pyproject.toml``::

    [project.entry-points."privauditor.attacks"]
    my_attack = "my_package.my_attack"

    @ATTACKS.register("loss")
    class LossAttack: ...
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from .errors import PrivauditorError, UnknownNameError, unknown_name_message

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names used in sweep files to plugin objects, discovered from one package."""

    def __init__(self, kind: str, package: str, group: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self.group = group  # entry-point group of plugins from other installed packages
        self._entries: dict[str, T] = {}
        self._discovered = False
        self._lock = threading.RLock()  # threads may ask at once; plugins register while it is held

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` (duplicates are an error)."""

        def decorate(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorate

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``; a second registration of the same name is a bug."""
        if name in self._entries and self._entries[name] is not obj:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._entries[name] = obj

    def remove(self, name: str) -> None:
        """Unregister ``name`` (what a command registered for its own run only)."""
        self._entries.pop(name, None)

    def discover(self) -> None:
        """Import every module of the plugin package once, so their decorators run (thread-safe: no
        caller sees a half-filled registry)."""
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            package = importlib.import_module(self.package)
            for module in pkgutil.iter_modules(package.__path__):
                if not module.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{module.name}")
            if self.group:
                self._load_entry_points()
            self._discovered = True

    def _load_entry_points(self) -> None:
        """Load the plugins other installed packages declare in this registry's entry-point group."""
        from importlib.metadata import entry_points

        for point in entry_points(group=self.group):
            try:
                point.load()  # importing the module runs its registration decorators
            except Exception as exc:  # a broken third-party plugin: one line naming it
                raise PrivauditorError(
                    f"{self.kind} plugin '{point.name}' ({point.value}) from entry point group "
                    f"{self.group} failed to load: {type(exc).__name__}: {exc}"
                ) from None

    def get(self, name: str) -> T:
        """The plugin registered as ``name``; unknown names raise :class:`UnknownNameError`."""
        self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(unknown_name_message(self.kind, name, self.names())) from None

    def build(self, name: str, params: dict | None = None) -> T:
        """An instance of the dataclass plugin ``name`` with field overrides ``params``, each checked
        against its field's type; an unknown field is a one-line error listing the known ones."""
        from .strict import build

        cls = self.get(name)
        if not dataclasses.is_dataclass(cls):
            if params:
                raise PrivauditorError(
                    f"{self.kind} '{name}' takes no hyper-parameters, not {sorted(params)}"
                )
            return cls()
        return build(cls, dict(params or {}), f"{self.kind} '{name}'")

    def __contains__(self, name: object) -> bool:
        self.discover()
        return name in self._entries

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self.discover()
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        """(name, plugin) pairs, sorted by name."""
        self.discover()
        for name in sorted(self._entries):
            yield name, self._entries[name]
