"""The plan is what runs: for every registered technique (in-context learning included) and a defence, a
cell's plan (:func:`~privauditor.tasks.cell.plan.plan_cell`, given the best checkpoint the cell found) names
exactly the attacks each checkpoint ran, the ones it skipped with the same reason, and views read by the
attacks that ran only; the skip rule the plan and an audit share; and the resolved spec as the one place a
cell's plugin objects are built."""

from __future__ import annotations

import copy
import pickle
from collections import Counter

import pytest

from privauditor.tasks.adaptations import ADAPTATIONS
from privauditor.tasks.attacks import build_attack
from privauditor.tasks.cell.plan import Facts, plan_cell, skip_reason
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.defences.dp import DPDefence
from privauditor.tasks.infra.results import Results
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.spec.resolved import CellSpec

#: an attack of each kind of rule: signals only, gradients (no context), a trajectory, a model of its own
ATTACKS = "attacks=[loss,gradnorm,lt_iqr,spv_mia]"
SMALL = ["split.members=8", "split.nonmembers=8", "split.validation=4", "split.population=8",
         "train.max_length=32", "train.batch_size=4", "train.checkpoints=[1,2]", ATTACKS,
         "attack_params.spv_mia.epochs=1", "score.bootstrap=20"]  # fmt: skip
CELLS = [(t, "none") for t in ADAPTATIONS.names()] + [("lora", "dp")]


@pytest.mark.slow
@pytest.mark.parametrize(("technique", "defence"), CELLS)
def test_the_plan_names_exactly_what_the_cell_ran_and_skipped(tmp_path, technique, defence):
    settings = {
        "model": "tiny-llama",
        "adaptation": technique,
        "dataset": "finance",
        "seed": 0,
        "defence": defence,
    }
    outcome = run_cell(cell_config(settings, SMALL), tmp_path)
    cell = Results(tmp_path).cell(outcome.cell_id)
    record = cell.record()
    spec = CellSpec.from_dict(record["config"])
    best = next(i for i, c in enumerate(record["checkpoints"]) if c["best"])
    plan = plan_cell(spec, best=best)
    assert len(plan.checkpoints) == len(record["checkpoints"])
    for stage, (checkpoint, metrics) in zip(plan.checkpoints, cell.checkpoints(), strict=True):
        assert checkpoint["attacks"] == stage.runs
        ran_skipped = {a: m["skipped"] for a, m in metrics.items() if "skipped" in m and a in stage.skipped}
        assert ran_skipped == stage.skipped
        assert set(checkpoint["views"]) == set(stage.runs) - set(stage.skipped)
        planned = {a for view in stage.views for a in view.attacks}
        assert planned == set(stage.runs) - set(stage.skipped)
    if technique == "icl":  # gradients and a model of its own read no demonstrations: never planned
        assert all({"gradnorm", "spv_mia"} <= set(s.skipped) for s in plan.checkpoints if s.runs)
        assert not plan.adapts  # so a sweep reserves no second bundle for it
    elif len(plan.checkpoints) > 1:  # a trained technique: the trajectory attack reads the earlier one
        last = plan.checkpoints[-1]
        assert "lt_iqr" in last.runs and "lt_iqr" not in last.skipped


@pytest.mark.parametrize(
    ("attack", "facts", "reason"),
    [
        ("reference", Facts(reference=False), "no reference model"),
        ("lt_iqr", Facts(), "needs a training trajectory"),
        ("lt_iqr", Facts(earlier=True), None),
        ("spv_mia", Facts(recipe=False), "needs how the target was adapted"),
        ("gradnorm", Facts(in_context=True), "not defined for in-context learning"),
        ("loss", Facts(reference=False, recipe=False, in_context=True), None),
    ],
)
def test_one_skip_rule_for_plans_and_audits(attack, facts, reason):
    found = skip_reason(build_attack(attack), facts)
    assert (found is None) if reason is None else found.startswith(reason)


def test_a_cell_builds_its_technique_and_defence_once(tmp_path, monkeypatch):
    """A small LoRA cell under DP-SGD, run from its resolved spec (plan, training, every checkpoint's
    audit), constructs its adaptation and its defence once each; the objects the spec keeps enter neither
    its id, its dict, equality nor a copy or pickle of it (another process builds its own)."""
    settings = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance", "seed": 0, "defence": "dp"}
    small = ["split={members: 8, nonmembers: 8, validation: 4}", "train.max_length=32",
             "train.batch_size=4", "train.checkpoints=[1,2]", "attacks=[loss,lt_iqr]", "score.bootstrap=20"]  # fmt: skip
    spec = cell_config(settings, small).resolve()
    cell_id, found = spec.cell_id(), spec.to_dict()
    built: Counter[str] = Counter()
    for cls in (type(spec.technique()), DPDefence):  # counted from here on, on a fresh copy of the spec
        init = cls.__init__

        def counted(self, *args, _init=init, _name=cls.__name__, **kwargs):
            built[_name] += 1
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counted)
    fresh = copy.deepcopy(spec)
    assert fresh == spec and "_plugins" not in vars(fresh)
    outcome = run_cell(fresh, tmp_path)
    plan_cell(fresh)
    assert outcome.cell_id == cell_id and len(outcome.metrics) == 2
    assert built == {type(spec.technique()).__name__: 1, "DPDefence": 1}
    assert fresh.to_dict() == found and fresh == spec and fresh.cell_id() == cell_id
    assert "_plugins" not in vars(pickle.loads(pickle.dumps(fresh)))
