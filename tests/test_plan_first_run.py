"""``privauditor plan`` where a user first meets it, on this machine: what a first run builds (an empty
artefact cache), the fixed costs of a sweep and of its trials in the wall time, and the smoke sweep ranking
something on the default sweep's bases."""

from __future__ import annotations

import dataclasses
import os
import re
from collections import defaultdict

import pytest
import yaml

from privauditor.orchestrator.cli import main
from privauditor.orchestrator.plan import builds as bld
from privauditor.orchestrator.plan.inputs import load_prices, read_cluster
from privauditor.orchestrator.plan.plan import SWEEP_S, TRIAL_S, WORKER_S, plan_cells, tokens_for, totals
from privauditor.orchestrator.sweepfile.sweep import load_sweep
from privauditor.tasks.models import PROFILES

from .test_plan import totals_in, write

SWEEP = {
    "name": "first",
    "matrix": {"model": ["tiny-llama", "tiny-opt"], "adaptation": ["none", "lora"], "dataset": ["finance"]},
    "attacks": ["loss", "neighbourhood"],
    "attack_params": {"neighbourhood": {"k": 2}},
    "split": {"members": 16, "nonmembers": 16, "validation": 8},
    "train": {"max_length": 64},
}
BUILDS = re.compile(r"first builds: (.*): about (\d+) (s|min) on this machine")


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "first.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return str(path)


def test_an_empty_cache_adds_the_builds_without_building_and_a_full_one_does_not(
    tmp_path, sweep_file, monkeypatch, capsys
):
    """An empty cache: the corpus, both bases and the masked LM are priced at the default profile's steps
    and added to the wall time, and the cache stays empty; with the models there (their identities known),
    no build line and a wall time shorter by exactly that much."""
    cache = tmp_path / "cache"
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the builds' slots: this machine's CPUs
    monkeypatch.setenv("PRIVAUDITOR_CACHE", str(cache))
    monkeypatch.setenv("PRIVAUDITOR_PRETRAIN_PROFILE", "default")
    assert main(["plan", sweep_file]) == 0
    out = capsys.readouterr().out
    names, _, _ = BUILDS.search(out).groups()
    assert names == "the corpus and tokenizer, tiny-llama, tiny-opt bases, the masked LM", out
    assert not cache.exists() or not any(cache.iterdir())  # looked at, nothing built
    steps = PROFILES["default"].steps
    llama = bld.TASK_S + steps * bld.STEP_S["llama"] + PROFILES["default"].induction.steps * bld.COPY_STEP_S
    opt, masked = bld.TASK_S + steps * bld.STEP_S["opt"], bld.TASK_S + 2 * steps * bld.MASKED_LM_STEP_S
    expected = bld.CORPUS_S + max(llama + opt, masked)  # two at a time, in the order run starts them
    _, cold, _ = totals_in(out)

    import privauditor.tasks.models as models

    monkeypatch.setattr(models, "weights_identity", lambda model, build=True: f"sha256:{model}")
    monkeypatch.setattr(models, "masked_lm_identity", lambda build=True: "sha256:mlm")
    assert main(["plan", sweep_file]) == 0
    out = capsys.readouterr().out
    assert "first builds" not in out
    _, warm, _ = totals_in(out)
    assert (cold - warm) * 3600 == pytest.approx(expected, abs=0.1 * 60)  # the wall time's unit: 0.1 min
    assert cold > 3 * warm  # minutes of pre-training against a small sweep's own work


def test_builds_run_two_at_a_time_after_the_corpus():
    found = [bld.Build("corpus", "corpus", 5.0), bld.Build("a", "base", 100.0), bld.Build("b", "base", 50.0),
             bld.Build("c", "masked_lm", 60.0)]  # fmt: skip
    assert bld.build_seconds(found, 2) == 5.0 + 110.0  # b and c after each other, beside a
    assert bld.build_seconds(found, 1) == 215.0 and bld.build_seconds(found, 8) == 105.0
    line = bld.builds_line(found, 215.0, local=True)
    assert line.startswith("first builds: corpus, a, b bases, c: about 4 min on this machine")
    assert "not in the wall time" in bld.builds_line(found, 215.0, local=False)


def test_this_machines_wall_time_holds_the_sweeps_and_trials_fixed_costs(sweep_file, tmp_path):
    """On this machine (two trials at once on 2 CPUs): the sweep's start and end once, each trial's
    overhead and each of the two trial processes' first trial, spread over the two slots; none of it on a
    cluster's node types."""
    sweep, prices = load_sweep(sweep_file), load_prices()
    here = read_cluster(None, prices, None)
    here[0] = dataclasses.replace(here[0], cpus=2.0)  # the machine the constants were measured on
    planned = plan_cells(sweep, here, tokens_for(measure=False))
    found = totals(planned, here, None, builds_s=30.0)
    first = WORKER_S + prices["cpu_seconds"]["process"]
    busy = (sum(p.seconds for p in planned) + len(planned) * TRIAL_S + 2 * first) / 2
    longest = max(p.seconds for p in planned) + first + TRIAL_S
    assert found["wall_s"] == pytest.approx(SWEEP_S + 30.0 + max(busy, longest))
    assert found["fixed_s"] == SWEEP_S + 30.0
    prices_file, cluster_file, _ = write(tmp_path)
    nodes = read_cluster(cluster_file, load_prices(prices_file), None)
    on_cluster = plan_cells(sweep, nodes, tokens_for(measure=False))
    assert totals(on_cluster, nodes, None, builds_s=30.0)["fixed_s"] == 0.0


def test_the_smoke_sweep_ranks_techniques_on_the_default_sweeps_bases():
    """Two (model, dataset) blocks, each with two techniques besides the `none` control (what the
    findings' Answer needs to rank anything), on bases the default sweep builds too."""
    smoke, default = load_sweep("smoke"), load_sweep("default")
    blocks = defaultdict(set)
    for cell in smoke.cells:
        blocks[(cell.model, cell.dataset)].add(cell.adaptation)
    assert len(blocks) >= 2 and all(len(b - {"none"}) >= 2 and "none" in b for b in blocks.values())
    assert {c.model for c in smoke.cells} <= {c.model for c in default.cells}
    assert len(smoke.cells) <= 8
