"""The base class of view plugins, the context they compute from, and where they are kept.

A view's table is stored once per key: the view's name, version, parameters and auxiliary models, the
identity of every model it reads (name, weights, adaptation hash, tokenizer, dtype; not the role it plays,
so the base's signals are one table whether a cell scores the base or uses it as the reference), the hash
of the texts of every split part it reads, ``max_length`` and the seed. A view that reads only un-adapted
models (or none) goes to ``OUT/shared/views/``, where every cell of the same split finds it (the base's
signals, which every adaptation's reference attack reads, are computed once); one that reads the adapted
model goes to the cell's own ``views/``. A view that adapts a model of its own the way the target was
adapted (SPV-MIA's self-prompt reference) also keys on that :class:`Recipe`, which a cell passes to
``evaluate``. Files are written atomically under a lock, so concurrent cells compute each shared view
once; the cell that does is timed for it under the view's label and `` (shared)``. Nothing here imports
torch: attack workers read views with it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..infra.cache import file_lock, stable_hash
from ..infra.errors import PrivauditorError
from ..passes.scorer import ModelIdentity

if TYPE_CHECKING:
    import pyarrow as pa

    from ..datasets import Example

KEY_METADATA = b"privauditor.view_key"
#: marks a timed view that went to the shared store (work done once per split, by whichever cell came first)
SHARED = " (shared)"


@dataclass(frozen=True)
class Cost:
    """What a view costs per scored text: passes through a model, or records of model-free work."""

    forward: float = 0.0  # forward passes through the model the view reads
    backward: float = 0.0  # backward passes through it
    shared_forward: float = 0.0  # forward passes of work done once per split and shared by its cells
    records: float = 0.0  # records a model-free view fits on (the blind control's permutation test)

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            *(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True))
        )

    def __str__(self) -> str:
        parts = [f"{self.forward:g} fwd"] + ([f"{self.backward:g} bwd"] if self.backward else [])
        return " + ".join(parts) + (f" (+{self.shared_forward:g} shared fwd)" if self.shared_forward else "")


class View:
    """Base class of view plugins; subclasses are frozen ``@dataclass``es of parameters."""

    name: ClassVar[str]
    #: Bump whenever a change to the view alters its numbers (it is part of every cell id that reads it).
    version: ClassVar[int] = 1
    #: Computes a target that reads each text in a context of its own (in-context learning) as it is.
    in_context: ClassVar[bool] = True
    #: Adapts a model of its own from the target's base the way the target was (``ViewContext.recipe``).
    adapts: ClassVar[bool] = False
    #: Reads the target's signals at the earlier checkpoints of its training trajectory
    #: (``ViewContext.earlier``), which are part of its key.
    reads_earlier: ClassVar[bool] = False

    def models(self) -> tuple[str, ...]:
        """The models whose outputs the view holds: ``target`` (the model under attack), ``reference``."""
        return ("target",)

    def parts(self) -> tuple[str, ...]:
        """The split parts whose texts it reads: ``scored`` (members then non-members, the rows of
        ``signals.parquet``), ``population`` or ``known_members``."""
        return ("scored",)

    def needs(self) -> dict[str, int]:
        """The fewest records each split part it reads (but ``scored``) must hold."""
        return {part: 1 for part in self.parts() if part != "scored"}

    def cost(self) -> Cost:
        """Passes per scored text."""
        raise NotImplementedError

    def identity(self, build: bool) -> dict[str, str | None]:
        """Weights identities of auxiliary models the view uses (e.g. a masked LM); None for one not built
        yet when ``build`` is False."""
        return {}

    def hyperparameters(self) -> dict[str, Any]:
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}

    def key_parameters(self) -> dict[str, Any]:
        """The parameters the view's numbers depend on (its store key's share): all of them, less any that
        only pick which model plays a role (the models themselves are keyed by their identity)."""
        return self.hyperparameters()

    @property
    def label(self) -> str:
        """The view and the parameters it does not leave at their defaults, e.g. ``neighbours(k=5)``."""
        defaults = type(self)().hyperparameters()
        params = ", ".join(f"{k}={v}" for k, v in self.hyperparameters().items() if defaults.get(k) != v)
        return f"{self.name}({params})" if params else self.name

    def compute(self, context: ViewContext) -> pa.Table:
        """The view's table: a ``sample_id`` column in the order of ``context.examples(part)`` plus its own
        columns."""
        raise NotImplementedError

    def read(self, table: pa.Table) -> Any:
        """What an attack gets from the stored table (rows in the scored samples' order)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Recipe:
    """How the target was adapted from its base: what a view that adapts a model of its own the same way
    needs (the rest, ``max_length`` and the seed, is the context's; the epochs are the view's)."""

    model: str  # the base's name, as ``load_model`` takes it
    adaptation: str  # the technique's name
    adaptation_params: dict[str, Any]  # every hyper-parameter of the technique
    lr: float
    batch_size: int


@dataclass(frozen=True)
class Checkpoint:
    """An earlier checkpoint of the target's training trajectory: its step, adaptation hash and the file
    of its signals of the scored texts."""

    step: int
    adaptation: str
    signals: Path


#: member flag of each part's rows
PART_MEMBERS = {"members": True, "nonmembers": False, "population": False, "known_members": True}


@dataclass(eq=False, kw_only=True)
class ViewContext:
    """What views compute from: the models (the reference loaded only when a view needs it), the split's
    parts, scoring settings and the two stores (``shared``: views of un-adapted models; ``own``: the
    adapted model's). Each view is computed at most once per key. ``recipe``: how the target was adapted
    (None where it is not known: an audit of someone else's model); ``earlier``: the earlier checkpoints
    of the target's training trajectory, oldest first (none in an audit). ``elsewhere(view, context)`` starts
    computing and storing an ``adapts`` view out of this process (a Ray task of its own in a sweep) and
    returns the wait for it, whose result is kept in ``done_elsewhere`` under the view's label."""

    scorers: dict[str, Callable[[], Any]]
    identities: dict[str, ModelIdentity]
    parts: dict[str, Sequence[Example]]
    max_length: int
    batch_size: int
    seed: int
    shared: Path
    own: Path
    clock: Callable[[str, Callable[[], Any]], Any] = lambda step, work: work()
    recipe: Recipe | None = None
    elsewhere: Callable[[View, ViewContext], Callable[[], Any]] | None = None
    earlier: tuple[Checkpoint, ...] = ()

    def __post_init__(self) -> None:
        self._loaders, self._scorers = self.scorers, {}
        self._pending, self.done_elsewhere = {}, {}
        parts = self.parts
        self.parts = {"scored": [*parts["members"], *parts["nonmembers"]]} | {
            k: list(v) for k, v in parts.items() if k in PART_MEMBERS
        }
        self._member = {
            part: np.array([PART_MEMBERS[part]] * len(parts.get(part, ())), dtype=bool)
            for part in PART_MEMBERS
        }
        self._member["scored"] = np.r_[self._member["members"], self._member["nonmembers"]]
        self.shared, self.own = Path(self.shared), Path(self.own)

    def examples(self, part: str = "scored") -> list[Example]:
        return self.parts[part]

    def member(self, part: str = "scored") -> np.ndarray:
        return self._member[part]

    def scorer(self, role: str) -> Any:
        """The model in ``role`` ready to score (a reference is loaded on first use)."""
        if role not in self._scorers:
            self._scorers[role] = self._loaders[role]()
        return self._scorers[role]

    def available(self, view: View) -> bool:
        """Every model the view reads is there (an audit of a full checkpoint has no reference), and the
        target's recipe where the view adapts a model the same way."""
        models = all(role in self.identities for role in view.models())
        return models and (not view.adapts or self.recipe is not None)

    def key(self, view: View) -> dict[str, Any]:
        from ..datasets import content_hash

        return (
            {
                "view": view.name,
                "version": view.version,
                "params": view.key_parameters(),
                "identity": view.identity(True),
                "models": [dataclasses.asdict(self.identities[role]) for role in view.models()],
                "texts": {part: content_hash(self.parts[part]) for part in view.parts()},
                "max_length": self.max_length,
                "seed": self.seed,
            }
            | ({"recipe": dataclasses.asdict(self.recipe)} if view.adapts and self.recipe is not None else {})
            | ({"earlier": [[c.step, c.adaptation] for c in self.earlier]} if view.reads_earlier else {})
        )

    def path(self, view: View) -> Path:
        shared = all(self.identities[r].adaptation == "none" for r in view.models())
        root = (self.shared if shared else self.own) / "views" / view.name
        return root / f"{stable_hash(self.key(view), 16)}.parquet"

    def start(self, view: View) -> None:
        """Start ``view`` out of this process if it is one that goes there and is not stored yet, so it is
        computed while this process computes others."""
        if not (self.elsewhere and view.adapts and self.available(view)):
            return
        path = self.path(view)
        if not path.exists() and path not in self._pending:
            self._pending[path] = (view.label, self.elsewhere(view, self))

    def file(self, view: View) -> Path:
        """The stored table of ``view``, computed first (timed under its label) if it is not stored: here,
        or out of this process for an ``adapts`` view when ``elsewhere`` is set."""
        self.start(view)
        path = self.path(view)
        if path in self._pending:
            label, wait = self._pending.pop(path)
            self.done_elsewhere[label] = self.clock(label, wait)
            if not path.exists():
                raise PrivauditorError(f"view {label} was computed elsewhere but not stored at {path.name}")
        if not path.exists():
            with file_lock(path.with_suffix(".lock")):
                if not path.exists():
                    label = view.label + (SHARED if path.is_relative_to(self.shared) else "")
                    self.clock(label, lambda: _store(view.compute(self), self.key(view), path))
        return path

    def get(self, view: View) -> Any:
        """What ``view`` holds, as its ``read`` gives it (for views built on other views)."""
        from ..infra.files import read_table

        return view.read(read_table(self.file(view)))


def _store(table: pa.Table, key: dict[str, Any], path: Path) -> None:
    from ..infra.files import write_table

    metadata = (table.schema.metadata or {}) | {KEY_METADATA: json.dumps(key, sort_keys=True, default=str)}
    write_table(table.replace_schema_metadata(metadata), path)


def aligned(table: pa.Table, sample_ids: Sequence[str]) -> pa.Table:
    """``table``'s rows in the order of ``sample_ids`` (every id must be there)."""
    import pyarrow as pa

    present = table.column("sample_id").to_pylist()
    if present == list(sample_ids):
        return table
    index = {s: i for i, s in enumerate(present)}
    missing = [s for s in sample_ids if s not in index]
    if missing:
        raise KeyError(f"view lacks {len(missing)} sample(s), e.g. {missing[0]!r}")
    order = [index[s] for s in sample_ids]
    # by rows in Python: Table.take would import pyarrow.compute, and with it pandas, into attack workers
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    return pa.table(
        {
            name: pa.array([values[i] for i in order], table.schema.field(name).type)
            for name, values in columns.items()
        },
        metadata=table.schema.metadata,
    )
