"""A sweep's hypothesis: parsed strictly, and pre-registered only when committed before the run that
tests it, on declared blocks it was not formed on (read from records), every confirmatory attempt logged."""

from __future__ import annotations

import json
import subprocess

import pytest

from privauditor.orchestrator.sweepfile.attempts import attempts, log_attempt
from privauditor.orchestrator.sweepfile.hypothesis import Block, parse, registration
from privauditor.orchestrator.sweepfile.sweep import load_sweep
from privauditor.tasks.infra.errors import PrivauditorError

BLOCK = """hypothesis:
  classes: {prompt: prompt_based, lora: adapters, full: full}
  order: [prompt_based, adapters, full]
  formed_on:
    blocks: [{model: tiny-llama, base: "sha256:aa", dataset: finance}, {model: tiny-llama, base: "sha256:aa", dataset: sql}]
    seeds: [0]
  test_blocks: [{model: tiny-llama, base: "sha256:bb", dataset: finance}, {model: smollm2-135m, base: "sha256:cc", dataset: sql}]
"""
FORMED = {Block("tiny-llama", "sha256:aa", "finance"), Block("tiny-llama", "sha256:aa", "sql")}
FRESH = {Block("tiny-llama", "sha256:bb", "finance"), Block("smollm2-135m", "sha256:cc", "sql")}


def git(root, *args):
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A git repository whose sweep file gains the hypothesis in its second commit."""
    root = tmp_path / "repo"
    (root / "benchmarks" / "sweeps").mkdir(parents=True)
    git(root.parent, "init", "-q", str(root))
    git(root, "config", "user.email", "t@example.org")
    git(root, "config", "user.name", "t")
    sweep = root / "benchmarks" / "sweeps" / "mine.yaml"
    sweep.write_text("name: mine\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "before")
    before = git(root, "rev-parse", "HEAD")
    sweep.write_text("name: mine\n" + BLOCK)
    git(root, "commit", "-q", "-am", "hypothesis")
    return root, before, git(root, "rev-parse", "HEAD")


def commit_block(root, found):
    """Commit ``found`` as the sweep file's hypothesis block."""
    import yaml

    sweep = root / "benchmarks" / "sweeps" / "mine.yaml"
    sweep.write_text("name: mine\n" + yaml.safe_dump({"hypothesis": found.to_dict()}))
    git(root, "commit", "-q", "-am", "another hypothesis")


def hypothesis():
    from privauditor.tasks.infra.strict import load_yaml

    return parse(load_yaml(BLOCK)["hypothesis"])


def test_committed_before_the_run_on_fresh_declared_blocks_is_pre_registered(checkout):
    root, _, after = checkout
    found = registration(hypothesis(), "mine", {after, after + "+dirty"}, FRESH, root)
    assert found.confirmatory and found.commit == after and "committed in" in found.reason
    # one of the two fresh blocks alone is still a declared test block
    assert registration(
        hypothesis(), "mine", {after}, {Block("x", "sha256:bb", "finance")}, root
    ).confirmatory


def test_formed_blocks_new_seeds_undeclared_blocks_or_a_later_commit_make_it_exploratory(checkout):
    from privauditor.tasks.infra.strict import load_yaml

    root, before, after = checkout
    # new seeds of a formed block are the same block: the test's unit is the block
    reused = registration(
        hypothesis(), "mine", {after}, FRESH | {Block("tiny-llama", "sha256:aa", "sql")}, root
    )
    assert (
        not reused.confirmatory
        and "formed on block(s) (tiny-llama, sql), which this run uses" in reused.reason
    )
    other = registration(hypothesis(), "mine", {after}, {Block("tiny-opt", "sha256:dd", "finance")}, root)
    assert (
        not other.confirmatory
        and "(tiny-opt, finance) of this run are not among its test_blocks" in other.reason
    )
    late = registration(hypothesis(), "mine", {before}, FRESH, root)
    assert not late.confirmatory and "after the run's code" in late.reason
    unknown = registration(hypothesis(), "mine", {None}, FRESH, root)
    assert not unknown.confirmatory and "no git revision" in unknown.reason
    # formed_on with seeds and model names only (self-declared, the old form) is never confirmatory
    declared = parse(
        {**load_yaml(BLOCK)["hypothesis"], "formed_on": {"seeds": [0], "models": ["tiny-llama"]}}
    )
    commit_block(root, declared)
    head = git(root, "rev-parse", "HEAD")
    found = registration(declared, "mine", {head}, FRESH, root)
    assert not found.confirmatory and "formed_on names no blocks read from results" in found.reason
    changed = parse({"classes": {"prompt": "a", "full": "b"}, "order": ["a", "b"]})
    assert "no commit of this checkout holds it" in registration(changed, "mine", {after}, FRESH, root).reason


def test_test_blocks_among_the_formed_ones_are_refused_in_one_line():
    from privauditor.tasks.infra.strict import load_yaml

    data = load_yaml(BLOCK)["hypothesis"]
    overlapping = {
        **data,
        "test_blocks": [*data["test_blocks"], {"model": "tiny-llama", "base": "sha256:aa", "dataset": "sql"}],
    }
    with pytest.raises(
        PrivauditorError, match=r"test_blocks: \(tiny-llama, sql\) is among formed_on.blocks"
    ) as error:
        parse(overlapping)
    assert "\n" not in str(error.value)
    # the same base under another name is the same block; another dataset of a formed base is fresh
    renamed = {**data, "test_blocks": [{"model": "renamed", "base": "sha256:aa", "dataset": "finance"}]}
    with pytest.raises(PrivauditorError, match="among formed_on.blocks"):
        parse(renamed)
    assert parse(
        {**data, "test_blocks": [{"model": "tiny-llama", "base": "sha256:aa", "dataset": "climate"}]}
    )


def test_a_tiny_base_rebuilt_from_its_recipe_is_the_same_block_and_another_seed_is_not(checkout, tmp_path):
    """A tiny base rebuilt elsewhere may differ in its last bits (another sha256) from one recipe: the
    recipe (its cache folder, which hashes the pre-training seed) still makes it the same block."""
    from privauditor.orchestrator.sweepfile.hypothesis import blocks_of

    root, _, _ = checkout
    recipe = {
        "model": "tiny-llama",
        "base": "sha256:aa",
        "dataset": "finance",
        "recipe": "tiny-llama-default-0a",
    }
    data = {"classes": {"prompt": "a", "full": "b"}, "order": ["a", "b"], "formed_on": {"blocks": [recipe]}}
    rebuilt = {**recipe, "base": "sha256:zz"}
    with pytest.raises(PrivauditorError, match=r"\(tiny-llama, finance\) is among formed_on.blocks"):
        parse({**data, "test_blocks": [rebuilt]})
    reseeded = {**rebuilt, "recipe": "tiny-llama-default-0b"}
    found = parse({**data, "test_blocks": [reseeded]})
    commit_block(root, found)
    head = git(root, "rev-parse", "HEAD")
    assert registration(found, "mine", {head}, {Block(**reseeded)}, root).confirmatory
    again = registration(found, "mine", {head}, {Block(**rebuilt)}, root)
    assert not again.confirmatory and "formed on block(s) (tiny-llama, finance)" in again.reason
    # a results folder's cells give the recipe of a tiny base (its cache folder) and none for another
    for name, model, path in (("a", "tiny-llama", "tiny-llama-default-0a"), ("b", "smollm2-135m", "x")):
        (tmp_path / "cells" / name).mkdir(parents=True)
        config = {"model": model, "base": f"sha256:{name}", "dataset": "sql", "seed": 0}
        (tmp_path / "cells" / name / "cell.json").write_text(
            json.dumps({"config": config, "model": {"path_name": path}, "versions": {}})
        )
    blocks, _, seeds = blocks_of(tmp_path, {"a", "b"})
    assert {(b.model, b.recipe, b.seeds) for b in blocks} == {
        ("tiny-llama", "tiny-llama-default-0a", (0,)),
        ("smollm2-135m", "", (0,)),
    }
    assert seeds == {0}
    # `report --formed-on` writes each (base, dataset) once, with the split seeds its cells drew
    from privauditor.orchestrator.sweepfile.hypothesis import formed_on_of

    again = tmp_path / "cells" / "c"
    again.mkdir()
    config = {"model": "smollm2-135m", "base": "sha256:b", "dataset": "sql", "seed": 3}
    again.joinpath("cell.json").write_text(json.dumps({"config": config, "model": {}, "versions": {}}))
    formed = formed_on_of(tmp_path, [{"cell_id": c} for c in ("a", "b", "c")])
    assert [(b["model"], b["seeds"]) for b in formed["blocks"]] == [
        ("smollm2-135m", [0, 3]),
        ("tiny-llama", [0]),
    ]
    assert parse({"classes": {"prompt": "a", "full": "b"}, "order": ["a", "b"], "formed_on": formed})


def test_the_attempts_log_grows_by_one_per_confirmatory_run_and_not_on_a_rerun(tmp_path):
    found = hypothesis()
    page = {"L": 30.0, "p_value": 0.01, "n_blocks": 2}
    assert attempts(tmp_path, found) == 0
    assert log_attempt(tmp_path, found, {"a", "b"}, page) == 1
    assert log_attempt(tmp_path, found, {"b", "a"}, page) == 1  # the same cells reported again
    assert log_attempt(tmp_path, found, {"a", "b", "c"}, page) == 2  # another run's cells
    other = parse({"classes": {"prompt": "a", "full": "b"}, "order": ["a", "b"]})
    assert log_attempt(tmp_path, other, {"z"}, page) == 1 and attempts(tmp_path, found) == 2
    lines = (tmp_path / "hypothesis_attempts.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all('"p_value": 0.01' in line for line in lines)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"classes": {"full": "a"}, "order": ["a"]}, "two or more classes"),
        ({"classes": {"full": "a", "lora": "c"}, "order": ["a", "b"]}, r"classes \['c'\] are not in"),
        ({"classes": {"full": "a", "lora": "a"}, "order": ["a", "b"]}, r"\['b'\] have no technique"),
        ({"classes": {"full": "a"}, "order": ["a", "b"], "checkpoint": "first"}, "last or best"),
        ({"classes": {"full": "a"}, "order": ["a", "b"], "colour": 1}, "unknown key 'colour'"),
    ],
)
def test_a_malformed_hypothesis_is_a_one_line_error(block, message):
    with pytest.raises(PrivauditorError, match=message) as error:
        parse(block)
    assert "\n" not in str(error.value)


def test_the_default_sweep_carries_a_hypothesis_over_its_techniques(tmp_path):
    sweep = load_sweep("default")
    assert sweep.hypothesis is not None and sweep.hypothesis.formed_on.seeds == (0,)
    assert set(sweep.hypothesis.classes) <= {c.adaptation for c in sweep.cells}
    bad = tmp_path / "bad.yaml"
    bad.write_text("matrix: {model: [tiny-gpt2], adaptation: [full], dataset: [sql]}\n"
                   "hypothesis: {classes: {full: a, lora: b}, order: [a, b]}\n")  # fmt: skip
    with pytest.raises(PrivauditorError, match=r"names techniques the matrix lacks: \['lora'\]"):
        load_sweep(str(bad))


def test_a_run_of_test_blocks_before_the_hypothesis_commit_is_refused(
    checkout, tmp_path, monkeypatch, capsys
):
    """``privauditor run`` checks, before anything is written, that the code descends from the commit
    that holds the hypothesis; --exploratory runs it anyway (its test then exploratory)."""
    from privauditor.orchestrator.sweepfile import hypothesis as module
    from privauditor.orchestrator.sweepfile.hypothesis import check_committed

    root, before, after = checkout
    with pytest.raises(
        PrivauditorError, match=r"committed in [0-9a-f]{7}, which the code that would run"
    ) as error:
        check_committed(hypothesis(), "mine", root, revision=before)
    assert "\n" not in str(error.value)
    check_committed(hypothesis(), "mine", root, revision=after)  # its commit and descendants pass
    check_committed(hypothesis(), "mine", root)  # HEAD
    changed = parse({**hypothesis().to_dict(), "order": ["full_x", "adapters", "prompt_based"],
                     "classes": {"prompt": "prompt_based", "lora": "adapters", "full": "full_x"}})  # fmt: skip
    with pytest.raises(PrivauditorError, match="no commit of this checkout holds it"):
        check_committed(changed, "mine", root)  # edited, not committed: refused
    check_committed(
        parse({"classes": {"full": "a", "lora": "b"}, "order": ["a", "b"]}), "mine", root
    )  # no test blocks
    # the command: refused before a results folder exists
    sweep = tmp_path / "mine.yaml"
    sweep.write_text(
        "name: mine\nmatrix: {model: [tiny-llama], adaptation: [prompt, lora, full], dataset: [finance]}\n"
        "attacks: [loss]\n" + BLOCK
    )
    monkeypatch.setattr(module, "first_commit", lambda *a: before)  # held only by a commit HEAD skips
    monkeypatch.setattr(module, "_git", lambda root, *a: subprocess.CompletedProcess(a, 1, "", ""))
    from privauditor.orchestrator.cli import main

    assert main(["run", str(sweep), "--out", str(tmp_path / "out")]) != 0
    assert "its hypothesis was committed in" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_fresh_split_draws_of_a_formed_block_are_declared_by_their_seeds(checkout):
    """A (base, dataset) block listed with its seeds: other seeds of it are a fresh draw the hypothesis
    may name as a test block (and the registration says so); a block without seeds covers every seed."""
    root, _, _ = checkout
    formed = {"model": "smollm2-135m", "base": "sha256:cc", "dataset": "finance", "seeds": [0]}
    data = {"classes": {"prompt": "a", "full": "b"}, "order": ["a", "b"], "formed_on": {"blocks": [formed]},
            "test_blocks": [{**formed, "seeds": [1, 2]}, {"model": "t", "base": "sha256:dd", "dataset": "sql"}]}  # fmt: skip
    found = parse(data)
    with pytest.raises(PrivauditorError, match="among formed_on.blocks"):
        parse({**data, "test_blocks": [{**formed, "seeds": [0, 1]}]})
    with pytest.raises(PrivauditorError, match="among formed_on.blocks"):
        parse({**data, "test_blocks": [{k: v for k, v in formed.items() if k != "seeds"}]})
    commit_block(root, found)
    head = git(root, "rev-parse", "HEAD")
    run = {Block("smollm2-135m", "sha256:cc", "finance", seeds=(s,)) for s in (1, 2)}
    run |= {Block("t", "sha256:dd", "sql", seeds=(1,))}
    done = registration(found, "mine", {head}, run, root)
    assert done.confirmatory and "on 2 declared blocks" in done.reason
    assert "1 of them fresh split draws of formed blocks: (smollm2-135m, finance)" in done.reason
    again = registration(
        found, "mine", {head}, {Block("smollm2-135m", "sha256:cc", "finance", seeds=(0,))}, root
    )
    assert not again.confirmatory and "formed on block(s) (smollm2-135m, finance)" in again.reason
    assert parse({**data, "alpha": 0.01}).alpha == 0.01 and found.to_dict().get("alpha") is None
    with pytest.raises(PrivauditorError, match="alpha must be between 0 and 0.5"):
        parse({**data, "alpha": 0.7})


def test_a_cell_records_the_revision_of_the_checkout_it_runs_from():
    """What the registration reads (``privauditor_git``): this checkout's HEAD, ``+dirty`` with changes."""
    from pathlib import Path

    from privauditor.tasks.infra import provenance

    root = Path(provenance.__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("privauditor is not running from a git checkout")
    head = git(root, "rev-parse", "HEAD")
    assert provenance.git_revision() in (head, head + "+dirty")
    assert provenance.versions()["privauditor_git"].startswith(head)
