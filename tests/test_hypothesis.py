"""A sweep's hypothesis: parsed strictly, and pre-registered only when committed before the run that
tests it, on seeds not used to form it."""

from __future__ import annotations

import subprocess

import pytest

from privauditor.orchestrator.report.hypothesis import parse, registration
from privauditor.orchestrator.run.sweep import load_sweep
from privauditor.tasks.errors import PrivauditorError

BLOCK = """hypothesis:
  classes: {prompt: prompt_based, lora: adapters, full: full}
  order: [prompt_based, adapters, full]
  formed_on: {seeds: [0]}
"""


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
    from privauditor.tasks.settings import load_yaml

    return parse(load_yaml(BLOCK)["hypothesis"])


def test_committed_before_the_run_on_fresh_seeds_is_pre_registered(checkout):
    root, _, after = checkout
    found = registration(hypothesis(), "mine", {after, after + "+dirty"}, {1, 2}, root)
    assert found.confirmatory and found.commit == after and "committed in" in found.reason


def test_seeds_it_was_formed_on_or_a_later_commit_make_it_exploratory(checkout):
    from privauditor.tasks.settings import load_yaml

    root, before, after = checkout
    reused = registration(hypothesis(), "mine", {after}, {0, 1}, root)
    assert not reused.confirmatory and "formed on seed(s) 0, which this run uses" in reused.reason
    late = registration(hypothesis(), "mine", {before}, {1}, root)
    assert not late.confirmatory and "after the run's code" in late.reason
    unknown = registration(hypothesis(), "mine", {None}, {1}, root)
    assert not unknown.confirmatory and "no git revision" in unknown.reason
    on_tiny = parse({**load_yaml(BLOCK)["hypothesis"], "formed_on": {"seeds": [0], "models": ["tiny-llama"]}})
    commit_block(root, on_tiny)
    head = git(root, "rev-parse", "HEAD")
    real = registration(on_tiny, "mine", {head}, {0}, root, models={"smollm2-135m"})
    assert real.confirmatory and "on bases not used to form it" in real.reason  # same seed, another base
    again = registration(on_tiny, "mine", {head}, {0}, root, models={"smollm2-135m", "tiny-llama"})
    assert not again.confirmatory and "formed on seed(s) 0" in again.reason
    changed = parse({"classes": {"prompt": "a", "full": "b"}, "order": ["a", "b"]})
    assert "no commit of this checkout holds it" in registration(changed, "mine", {after}, {1}, root).reason


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
