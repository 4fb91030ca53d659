"""Plugins from other installed packages: an attack added through an entry point, without editing privauditor."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import privauditor.tasks
from privauditor.tasks.attacks import ATTACKS

TOY_ATTACK = '''
"""``worst_token``: the log-probability of a text's least likely target token (a toy attack)."""

from dataclasses import dataclass

import numpy as np

from privauditor.tasks.attacks import ATTACKS, Attack


@ATTACKS.register("worst_token")
@dataclass
class WorstTokenAttack(Attack):
    """Minimum per-token log-probability, on the target's signals (the default view)."""

    name = "worst_token"
    paper = "https://example.org/toy"

    def score(self, views):
        return np.array([float(np.min(lp)) for lp in views["signals"].logp])
'''


TOY_DEFENCE = '''
"""``step_log``: trains as without a defence, through its own step function, and records the steps it
took (a toy defence: its settings, tag, hooks and record are a defence plugin's whole surface)."""

from dataclasses import dataclass

from privauditor.tasks.defences import DEFENCES, Defence, Guard
from privauditor.tasks.training.loop import LocalStep


@dataclass(frozen=True)
class StepLogSettings:
    every: int = 1


@DEFENCES.register("step_log")
class StepLog(Defence):
    name = "step_log"
    settings = StepLogSettings

    def tag(self, resolved):
        return f"+steplog{resolved['every']}"

    def guard(self, resolved, run):
        taken = []

        def make_step(model, parameters, lr, warmup):
            step = LocalStep(model, parameters, lr, warmup)

            def logged(batch, weight):
                taken.append(len(batch["input_ids"]))
                return step(batch, weight)

            return logged

        return Guard(loop={"make_step": make_step},
                     record=lambda steps: {"name": "step_log", "steps": steps, "rows": taken[:: resolved["every"]]})
'''


def installed_package(site: Path, module: str = "worst_token", source: str = TOY_ATTACK,
                      group: str = "privauditor.attacks") -> None:  # fmt: skip
    """A throw-away distribution on ``site``: one module and its entry point in ``group``, as ``pip
    install`` would leave them (``*.dist-info`` with ``entry_points.txt``)."""
    (site / "privauditor_toy").mkdir(parents=True)
    (site / "privauditor_toy" / "__init__.py").write_text("")
    (site / "privauditor_toy" / f"{module}.py").write_text(source)
    info = site / "privauditor_toy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: privauditor-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{module} = privauditor_toy.{module}\n")


def fingerprint(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def test_an_attack_from_another_installed_package_runs_in_a_cell(tmp_path):
    site, out = tmp_path / "site", tmp_path / "results"
    installed_package(site)
    tasks = Path(privauditor.tasks.__file__).parent
    before = fingerprint(tasks)
    script = textwrap.dedent(f"""
        import sys
        from privauditor.orchestrator.cli import main
        sizes = ["split={{members: 8, nonmembers: 8, validation: 4}}", "attacks=[loss,worst_token]"]
        code = main(["cell", "--model", "tiny-gpt2", "--adaptation", "none", "--dataset", "finance",
                     "--out", {str(out)!r}, *[f"--set={{s}}" for s in sizes]])
        sys.exit(code or main(["ls", "attacks"]))
    """)
    env = os.environ | {"PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert any(line.startswith("worst_token ") for line in done.stdout.splitlines())  # `ls attacks` knows it
    (cell_dir,) = (out / "cells").iterdir()
    metrics = json.loads((cell_dir / "metrics.json").read_text())
    assert set(metrics) == {"loss", "worst_token"} and 0 <= metrics["worst_token"]["auc"] <= 1
    signals = pq.read_table(cell_dir / "signals.parquet")
    scores = pq.read_table(cell_dir / "scores.parquet").to_pylist()
    toy = [r["score"] for r in scores if r["attack"] == "worst_token"]
    assert toy == [float(np.min(lp)) for lp in signals.column("logp").to_pylist()]
    # nothing of privauditor was edited, and this process never saw the plugin
    assert "worst_token" not in ATTACKS.names() and fingerprint(tasks) == before


def test_a_defence_from_another_installed_package_trains_a_cell_through_its_hooks(tmp_path):
    """A defence is one file: registered through an entry point, its settings checked, its tag in the cell
    id, its step function the one that trains, its record in ``cell.json``."""
    site, out = tmp_path / "site", tmp_path / "results"
    installed_package(site, "step_log", TOY_DEFENCE, "privauditor.defences")
    sizes = "split={members: 8, nonmembers: 8, validation: 4}"
    script = textwrap.dedent(f"""
        import sys
        from privauditor.orchestrator.cli import main
        cell = ["cell", "--model", "tiny-gpt2", "--adaptation", "head", "--dataset", "finance", "--out", {str(out)!r},
                "--set", {sizes!r}, "--set", "attacks=[loss]", "--set", "train.epochs=2", "--set", "train.batch_size=4",
                "--set", "defence=step_log", "--set", "defence_params.step_log.every=2"]
        if main([*cell[:-2], "--set", "defence_params.step_log.every=two"]) != 2:
            sys.exit("a setting of the wrong type was accepted")
        sys.exit(main(cell))
    """)
    env = os.environ | {"PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "defence_params.step_log.every must be int" in done.stderr
    (cell_dir,) = (out / "cells").iterdir()
    assert cell_dir.name.startswith("tiny-gpt2__head+steplog2__finance__s0__")
    record = json.loads((cell_dir / "cell.json").read_text())
    assert record["config"]["defence_params"] == {"every": 2, "version": 1}
    # 8 members in batches of 4 for 2 epochs: 4 steps, each through the plugin's step; every 2nd logged
    assert record["train"]["steps"] == 4 and record["defence"] == {
        "name": "step_log",
        "steps": 4,
        "rows": [4, 4],
    }
    assert "loss" in json.loads((cell_dir / "metrics.json").read_text())


def test_a_family_declares_transposed_linear_layers_exactly_when_its_model_has_them():
    """peft's ``fan_in_fan_out`` (LoRA, IA3) comes from ``Family.transposed_linear``: True exactly for the
    families whose model holds transformers' Conv1D layers (weights stored as in x out), such as GPT-2."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
    from transformers.pytorch_utils import Conv1D

    from privauditor.tasks.models import FAMILIES, tiny_config

    found = {}
    for name in FAMILIES.names():
        family = FAMILIES.get(name)
        auto = AutoModelForSeq2SeqLM if family.seq2seq else AutoModelForCausalLM
        model = auto.from_config(tiny_config(name))
        found[name] = (family.transposed_linear, any(isinstance(m, Conv1D) for m in model.modules()))
    assert all(declared == has for declared, has in found.values()), found
    assert found["gpt2"] == (True, True) and found["llama"] == (False, False)
