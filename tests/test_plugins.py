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


def installed_package(site: Path) -> None:
    """A throw-away distribution on ``site``: a module and its ``privauditor.attacks`` entry point, as
    ``pip install`` would leave them (``*.dist-info`` with ``entry_points.txt``)."""
    (site / "privauditor_toy").mkdir(parents=True)
    (site / "privauditor_toy" / "__init__.py").write_text("")
    (site / "privauditor_toy" / "worst_token.py").write_text(TOY_ATTACK)
    info = site / "privauditor_toy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: privauditor-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[privauditor.attacks]\nworst_token = privauditor_toy.worst_token\n"
    )


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
