"""spv_mia (Fu et al. 2024) and its ``self_prompted`` view: the target continues the population's prompts,
the reference is adapted from the base on those texts alone, the view is keyed by the target's recipe and
unavailable without one, and in a cell the attack runs at the last checkpoint alone with one finite score
per scored sample. The golden value of its formula is in test_golden.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from privauditor.tasks.attacks import build_attack
from privauditor.tasks.cell.run import run_cell
from privauditor.tasks.data.splits import draw_split
from privauditor.tasks.datasets import Example, load_dataset
from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.passes.forward import mean_nll
from privauditor.tasks.passes.scorer import ModelIdentity, Scorer
from privauditor.tasks.passes.signal_table import Signals
from privauditor.tasks.spec.config import cell_config
from privauditor.tasks.training.loop import encode
from privauditor.tasks.views import build_view
from privauditor.tasks.views._base import Recipe, ViewContext
from privauditor.tasks.views.self_prompted import seeded, self_prompted_texts

from .helpers import fresh_base

PARTS = "split={members: 6, nonmembers: 6, validation: 4, population: 6}"
SMALL = [PARTS, "train.max_length=32", "train.batch_size=4", "train.checkpoints=[1,2]",
         "attacks=[loss,spv_mia]", "attack_params.spv_mia={k: 2, epochs: 1}"]  # fmt: skip
SETTINGS = {"model": "tiny-gpt2", "adaptation": "lora", "dataset": "finance", "seed": 0}


@pytest.fixture(scope="module")
def spv_cell(tmp_path_factory):
    """A LoRA cell on tiny-gpt2 with two checkpoints, 6 + 6 scored, 6 population records; spv_mia at k 2
    and a one-epoch reference."""
    config = cell_config(SETTINGS, SMALL)
    return config, run_cell(config, tmp_path_factory.mktemp("spv"))


def test_spv_mia_runs_at_the_last_checkpoint_alone_with_one_finite_score_per_sample(spv_cell):
    _, outcome = spv_cell
    record = json.loads((outcome.path / "cell.json").read_text())
    assert [c["attacks"] for c in record["checkpoints"]] == [["loss"], ["loss", "spv_mia"]]
    rows = [r for r in pq.read_table(outcome.path / "scores.parquet").to_pylist() if r["attack"] == "spv_mia"]
    assert len(rows) == 12 == len({r["sample_id"] for r in rows})
    assert all(math.isfinite(r["score"]) for r in rows)
    assert len({round(r["score"], 9) for r in rows}) > 1  # not a constant: the two variations differ


def test_the_reference_is_adapted_from_the_base_by_the_targets_recipe(spv_cell):
    config, outcome = spv_cell
    (path,) = (outcome.path / "views" / "self_prompted").glob("*.parquet")  # the last checkpoint's alone
    table = pq.read_table(path)
    key = json.loads(table.schema.metadata[b"privauditor.view_key"])
    spec = config.resolve()
    assert key["recipe"] == {"model": "tiny-gpt2", "adaptation": "lora", "lr": spec.train.lr, "batch_size": 4,
                             "adaptation_params": spec.adaptation_params}  # fmt: skip
    assert set(key["texts"]) == {"scored", "population"}
    split = draw_split(load_dataset("finance"), config.split, 0)
    scored = [*split.members, *split.nonmembers]
    assert table.column("sample_id").to_pylist() == [e.sample_id for e in scored]
    reference = np.asarray(table.column("reference_nll").to_pylist())
    neighbours = table.column("reference_neighbour_nll").to_pylist()
    assert np.isfinite(reference).all() and all(len(n) == 2 and np.isfinite(n).all() for n in neighbours)
    _, tokenizer, base = fresh_base("gpt2")
    base_nll = mean_nll(base, tokenizer, scored, 32, False)
    target_nll = Signals.from_table(pq.read_table(outcome.path / "signals.parquet")).nll
    assert not np.allclose(reference, base_nll, atol=1e-4)  # trained: not the base
    assert not np.allclose(reference, target_nll, atol=1e-4)  # and not the target


def test_on_the_unadapted_base_the_reference_is_the_base_and_every_score_is_zero(tmp_path):
    """``none`` trains nothing: no text is sampled, the reference is the base with the target's weights, and
    its numbers are the target's to the bit (batched and averaged alike), so the control scores exactly 0."""
    outcome = run_cell(cell_config(SETTINGS | {"adaptation": "none"}, SMALL), tmp_path)
    rows = [r for r in pq.read_table(outcome.path / "scores.parquet").to_pylist() if r["attack"] == "spv_mia"]
    assert len(rows) == 12 and all(r["score"] == 0.0 for r in rows)
    assert outcome.metrics["spv_mia"]["auc"] == 0.5


@pytest.mark.parametrize("family_name", ["llama", "t5"])
def test_self_prompt_texts_continue_the_population_records_prompts(family_name):
    family, tokenizer, model = fresh_base(family_name)
    population = [
        Example(f"pop{i}", e.prompt, e.target) for i, e in enumerate(load_dataset("finance").examples[:5])
    ]
    population.append(Example("short", population[0].prompt, "Yes."))  # fewer tokens than the prompt takes

    def texts(seed):
        with seeded(model):
            return self_prompted_texts(
                Scorer(model, tokenizer, family.seq2seq, None), population, 4, 24, 4, seed
            )

    written = texts(0)
    assert [e.sample_id for e in written] == [e.sample_id for e in population]
    assert [e.prompt for e in written] == [e.prompt for e in population]
    encoded = encode(tokenizer, population, 24, family.seq2seq)
    for record, text, item in zip(population, written, encoded, strict=True):
        target = item["labels"] if family.seq2seq else [t for t in item["labels"] if t != -100]
        head = tokenizer.decode(target[: min(4, len(target) - 1)], skip_special_tokens=True)
        assert text.target.startswith(head) and text.target != record.target, (record.target, text.target)
    assert texts(0) == written and texts(1) != written  # seeded


def test_the_view_needs_the_targets_recipe_and_is_keyed_by_it(tmp_path):
    identity = ModelIdentity("tiny-gpt2", "sha256:abc", "deadbeef", "tok:4096", "torch.float32")
    examples = [Example(f"s{i}", "p\n", f"text {i}") for i in range(4)]
    parts = {"members": examples[:2], "nonmembers": examples[2:], "population": examples[:1]}

    def context(recipe=None):
        return ViewContext(
            scorers={"target": lambda: None},
            identities={"target": identity},
            parts=parts,
            max_length=32,
            batch_size=4,
            seed=0,
            shared=tmp_path,
            own=tmp_path,
            recipe=recipe,
        )

    view, signals = build_view("self_prompted"), build_view("signals")
    assert not context().available(view) and context().available(signals)  # an audit: skipped
    recipe = Recipe("tiny-gpt2", "lora", {"r": 16}, 0.01, 4)
    assert context(recipe).available(view)
    keyed = context(recipe).key(view)
    assert keyed["recipe"]["lr"] == 0.01 and "recipe" not in context(recipe).key(signals)
    other = Recipe("tiny-gpt2", "lora", {"r": 8}, 0.01, 4)
    assert context(other).path(view) != context(recipe).path(view)
    assert context(other).path(signals) == context(recipe).path(signals)


@pytest.mark.parametrize(
    ("params", "match"),
    [({"k": 0}, "k must be a positive int"), ({"epochs": 0}, "epochs must be an int >= 1"),
     ({"prompt_tokens": -1}, "prompt_tokens must be"), ({"mask_fraction": 1.0}, "mask_fraction")],
)  # fmt: skip
def test_bad_spv_mia_hyper_parameters_are_one_line_errors(params, match):
    with pytest.raises(PrivauditorError, match=match):
        build_attack("spv_mia", params)


def test_spv_mia_asks_for_a_population_up_front():
    with pytest.raises(PrivauditorError, match="spv_mia' needs split.population > 0"):
        cell_config(SETTINGS, ["attacks=[spv_mia]"])


def test_ls_attacks_lists_spv_mia_with_its_access_cost_and_checkpoint():
    from privauditor.orchestrator.tables import attacks_listing

    table = attacks_listing().split("\n\n")[0]  # the hyper-parameter listing below also names spv_mia
    (row,) = [line for line in table.splitlines() if line.startswith("spv_mia")]
    assert (
        "reference" in row and "23.5 fwd + 1 bwd (+10 shared fwd)" in row and row.rstrip().endswith(" last")
    )
    spv, neighbourhood = build_attack("spv_mia"), build_attack("neighbourhood")
    assert not spv.cheap and not spv.runs_at(1, 2, 1) and spv.runs_at(2, 2, 1)  # never at an earlier best
    assert neighbourhood.runs_at(1, 2, 1) and not neighbourhood.runs_at(0, 2, 1)


@pytest.mark.ray
@pytest.mark.slow
def test_in_a_sweep_the_reference_is_a_ray_task_of_its_own_and_scores_as_in_the_cell(spv_cell, tmp_path):
    """Under ``privauditor run`` the self-prompted view is computed by a Ray task in a second bundle of the
    trial's placement group, not by the trial's process, from the target rebuilt from its saved adapter;
    its scores are the in-process cell's."""
    ray = pytest.importorskip("ray")
    import yaml

    from privauditor.orchestrator.cli import main

    config, in_cell = spv_cell
    sweep = {
        "name": "spv", "matrix": {k: [v] for k, v in SETTINGS.items() if k != "seed"}, "seeds": [0],
        "attacks": ["loss", "spv_mia"], "attack_params": {"spv_mia": {"k": 2, "epochs": 1}},
        "split": {"members": 6, "nonmembers": 6, "validation": 4, "population": 6},
        "train": {"max_length": 32, "batch_size": 4, "checkpoints": [1, 2]},
        "score": {"bootstrap": config.score.bootstrap}, "run": {"cpus_per_trial": 1, "max_failures": 0},
    }  # fmt: skip
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main(["run", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "out")]) == 0
    finally:
        ray.shutdown()
    cell_dir = tmp_path / "out" / "cells" / in_cell.cell_id
    record = json.loads((cell_dir / "cell.json").read_text())
    last = record["checkpoints"][-1]
    assert set(last["elsewhere"]) == {"self_prompted(k=2, epochs=1)"}
    assert last["elsewhere"]["self_prompted(k=2, epochs=1)"]["pid"] != record["runtime"]["pid"]
    assert "elsewhere" not in record["checkpoints"][0]  # spv_mia runs at the last checkpoint alone

    def spv(folder):
        rows = pq.read_table(folder / "scores.parquet").to_pylist()
        return np.array([r["score"] for r in rows if r["attack"] == "spv_mia"])

    assert spv(cell_dir) == pytest.approx(spv(in_cell.path), rel=1e-4, abs=1e-6)


def test_only_a_cell_with_spv_mia_reserves_a_second_bundle_and_it_asks_for_no_more_gpus():
    from privauditor.orchestrator.run.view_tasks import bundles

    with_spv = cell_config(SETTINGS, SMALL).resolve(build=False)
    without = cell_config(SETTINGS, [*SMALL, "attacks=[loss,neighbourhood]"]).resolve(build=False)
    assert bundles(without, {"CPU": 2.0, "GPU": 1.0}) == ([{"CPU": 2.0, "GPU": 1.0}], "PACK")
    assert bundles(with_spv, {"CPU": 2.0, "GPU": 1.0}) == ([{"CPU": 2.0, "GPU": 0.5}] * 2, "STRICT_PACK")
    assert bundles(with_spv, {"CPU": 1.0}) == ([{"CPU": 1.0}] * 2, "STRICT_PACK")
    # a node type's custom resource (run.resources) is asked for once: a one-of node can hold the cell
    placed = bundles(with_spv, {"CPU": 1.0, "gpu_1x": 1.0})
    assert placed == ([{"CPU": 1.0, "gpu_1x": 1.0}, {"CPU": 1.0}], "STRICT_PACK")
