"""A cell's plan: what it does at each checkpoint, a pure function of its resolved spec (no torch).

:func:`plan_cell` turns a :class:`~privauditor.tasks.spec.resolved.CellSpec` into the stages a cell runs: the
cell's own (``split``, ``load_model``, the defence's, ``train``, ``utility``, ``save``, ``attacks``) and,
per checkpoint, the attacks that run there and the views they read, each with its timing label, the store
it goes to (shared by the split when every model it reads is un-adapted, else the cell's own), the models
and split parts it reads, its cost and the attacks that read it. The executor
(:func:`privauditor.tasks.cell.run.audit_checkpoints`) runs it; the planner prices it and calibration joins a
finished cell's ``timings`` with it by label (:mod:`privauditor.orchestrator.plan.work`); a sweep asks it
whether a cell needs a task for a view that adapts a model of its own
(:mod:`privauditor.orchestrator.run.view_tasks`).

Which checkpoint is best (lowest validation NLL) is known only once the snapshots are scored: the
executor passes it; a plan made before the run does not, and gives each costly attack a weight at the
one before the last, ``best_before_last`` (the chance that the best is an earlier checkpoint; 1 is the
upper bound), standing for the best.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..spec.resolved import AttackSpec, CellSpec
from ..views._base import SHARED, Cost, View

BASE, ADAPTED = "base", "adapted"


@dataclass(frozen=True)
class Facts:
    """What decides whether an attack can run on a model: a reference model is there, earlier checkpoints
    are (a trajectory), how the target was adapted is known (a cell's recipe; an audit has none), the
    target reads in-context demonstrations, the target is a shipped form (tasks/shipping) of a model."""

    reference: bool = True
    earlier: bool = False
    recipe: bool = True
    in_context: bool = False
    shipped: bool = False


def skip_reason(attack: Any, facts: Facts) -> str | None:
    """Why ``attack`` cannot run where ``facts`` hold (None: it runs). The one rule: the plan of a cell
    (:func:`plan_cell`) and of an audit decide with it, and the executor
    (:func:`privauditor.tasks.cell.evaluate.evaluate`) runs what they decided."""
    views = attack.views().values()
    if not facts.reference and any("reference" in view.models() for view in views):
        return "no reference model: a full checkpoint needs --reference"
    if not facts.earlier and any(view.reads_earlier for view in views):
        return "needs a training trajectory: at least 2 checkpoints"
    if not facts.recipe and any(view.adapts for view in views):
        return "needs how the target was adapted: only a cell knows it"
    if facts.in_context and not all(view.in_context for view in views if "target" in view.models()):
        return "not defined for in-context learning"
    if facts.shipped and any(view.reads_earlier for view in views):
        return "a shipped model comes without its training trajectory"
    if facts.shipped and any(view.cost().backward for view in views):
        return "a shipped model has no trained parameters of its own to take the gradient of (merged or quantised)"
    return None


def skipped_attacks(attacks: Iterable[AttackSpec], facts: Facts) -> dict[str, str]:
    """Attack name -> why it cannot run, for the attacks (a spec's :class:`AttackSpec`) that cannot."""
    found = {a.name: skip_reason(a.plugin(), facts) for a in attacks}
    return {name: reason for name, reason in found.items() if reason is not None}


@dataclass(frozen=True)
class ViewStage:
    """One view a checkpoint's attacks read. ``models``: (model name, ``base`` or ``adapted``) of each
    model it reads (none for a model-free view); ``computed`` False where the cell reads the store of an
    earlier checkpoint's (a view of un-adapted models, computed once); ``weight``: how surely it runs
    (the largest of its attacks')."""

    view: View
    label: str
    shared: bool
    models: tuple[tuple[str, str], ...]
    parts: tuple[str, ...]
    cost: Cost
    attacks: tuple[str, ...]
    weight: float
    computed: bool

    @property
    def key(self) -> tuple:
        """What the view is stored by, as far as the spec tells: its name, parameters, models and parts
        (the store's full key adds the weights', adaptation's and texts' hashes)."""
        params = json.dumps(self.view.key_parameters(), sort_keys=True, default=str)
        return self.view.name, params, self.models, self.parts

    @property
    def role(self) -> str:
        """The model whose passes it costs: the target where it reads it, else the reference."""
        return "target" if "target" in self.view.models() else "reference"


@dataclass(frozen=True)
class CheckpointPlan:
    """One checkpoint: ``attacks`` by name with how surely each runs there (1 or 0 once the best is
    known), whether the target is the base's own function there (``as_base``: a technique that starts as
    the base, at step 0, with only attacks that read signals: it reads the base's shared ones), whether
    an adapter is saved, the views read, and the attacks that are there but cannot run (``skipped``: name
    -> why, :func:`skip_reason`; they read no view and are recorded as skipped)."""

    index: int
    epoch: float
    attacks: dict[str, float]
    as_base: bool
    saves: bool
    views: tuple[ViewStage, ...]
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def runs(self) -> list[str]:
        """The attacks that may run here, in the spec's order."""
        return [name for name, weight in self.attacks.items() if weight > 0]


@dataclass(frozen=True)
class CellPlan:
    """The cell's stages: its ``technique``, the label of its defence's stage (None without one) and its
    checkpoints."""

    technique: Any
    defence_stage: str | None
    checkpoints: tuple[CheckpointPlan, ...]

    @property
    def stages(self) -> list[str]:
        """The labels of the cell's own stages but its views' (``cell.json`` ``timings`` keys)."""
        labels = ["split", "load_model", "train", "utility", "attacks"]
        labels += ["save"] * any(c.saves for c in self.checkpoints)
        return labels + ([self.defence_stage] if self.defence_stage else [])

    @property
    def adapts(self) -> bool:
        """A view of the cell adapts a model of its own (it runs out of the cell's process in a sweep)."""
        return any(stage.view.adapts for c in self.checkpoints for stage in c.views)


def plan_cell(spec: CellSpec, best: int | None = None, best_before_last: float = 1.0) -> CellPlan:
    """The plan of a resolved cell; ``best``: the index of its best checkpoint where it is known."""
    technique, defence = spec.technique(), spec.defence_plugin()
    attacks = {a.name: a.plugin() for a in spec.attacks}
    epochs = list(spec.train.checkpoints)
    base_target = not (technique.trains or technique.in_context)  # the target is the base's own weights
    reference = (spec.reference or spec.model, BASE)
    seen: set[tuple] = set()
    checkpoints = []
    for index, epoch in enumerate(epochs):
        weights = {name: _weight(attack, index, len(epochs), best, best_before_last)
                   for name, attack in attacks.items()}  # fmt: skip
        facts = Facts(earlier=index > 0, in_context=technique.in_context)
        skipped = {
            n: r for n, a in attacks.items() if weights[n] > 0 and (r := skip_reason(a, facts)) is not None
        }
        as_base = (
            technique.starts_as_base
            and epoch == 0
            and all(attacks[name].cheap for name, weight in weights.items() if weight > 0)
        )
        target = (spec.model, BASE if base_target or as_base else ADAPTED)
        reading = {n: w for n, w in weights.items() if n not in skipped}
        views = _views(attacks, reading, {"target": target, "reference": reference}, seen)
        saves = technique.trains and not as_base
        checkpoints.append(CheckpointPlan(index, epoch, weights, as_base, saves, views, skipped))
    return CellPlan(technique, None if defence is None else defence.stage, tuple(checkpoints))


def _views(
    attacks: dict[str, Any], weights: dict[str, float], models: dict[str, tuple[str, str]], seen: set[tuple]
) -> tuple[ViewStage, ...]:
    """The distinct views the attacks that may run read, in the order a cell computes them; ``seen``:
    the shared views of the cell's earlier checkpoints (updated)."""
    found: dict[tuple, ViewStage] = {}
    for name, weight in weights.items():
        if not weight:
            continue
        for view in attacks[name].views().values():
            read = tuple(models[role] for role in view.models())
            shared = all(state == BASE for _, state in read)
            stage = ViewStage(
                view, view.label + (SHARED if shared else ""), shared, read, view.parts(), view.cost(),
                (name,), weight, True,
            )  # fmt: skip
            first = found.get(stage.key)
            if first is not None:  # named as the first attack that reads it names it
                stage = dataclasses.replace(
                    first, attacks=(*first.attacks, name), weight=max(first.weight, weight)
                )
            found[stage.key] = stage
    stages = []
    for key, stage in found.items():
        computed = not (stage.shared and key in seen)
        seen.update([key] if stage.shared else [])
        stages.append(stage if computed else dataclasses.replace(stage, computed=False))
    return tuple(stages)


def _weight(attack: Any, index: int, count: int, best: int | None, best_before_last: float) -> float:
    """How surely ``attack`` runs at checkpoint ``index`` of ``count``: by its own rule
    (:meth:`~privauditor.tasks.attacks._base.Attack.runs_at`) where the best is known; before the run,
    where it runs were the best the last, and with weight ``best_before_last`` at the one before, where
    it would run were that one the best."""
    last = count - 1
    if best is not None:
        return float(attack.runs_at(index, last, best))
    if attack.runs_at(index, last, last):  # it runs here whichever checkpoint is best
        return 1.0
    return best_before_last if index == last - 1 and attack.runs_at(index, last, index) else 0.0
