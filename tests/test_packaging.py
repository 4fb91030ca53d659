"""Layout rules: every package folder is installed, and tasks/ never imports the orchestrator side."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"api": "privauditor", "tasks": "privauditor.tasks", "orchestrator": "privauditor.orchestrator"}


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([package, *relative]))
    assert found <= listed, f"package folders missing from pyproject.toml: {sorted(found - listed)}"


def test_tasks_never_import_orchestrator_ray_tune_or_wandb():
    forbidden = ("privauditor.orchestrator", "orchestrator", "ray", "wandb")
    offenders = []
    for path in (ROOT / "tasks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] in forbidden or n.startswith(forbidden[0])
            ]
    assert not offenders


def test_listing_imports_no_torch():
    """``ls`` and registry discovery stay instant: plugin modules keep heavy imports inside functions."""
    code = (
        "import sys; from privauditor.orchestrator.cli import main; main(['ls', 'models']); main(['ls', 'datasets']);"
        "main(['ls', 'adaptations']); main(['ls', 'attacks']);"
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"


def test_the_api_package_imports_no_torch_or_ray():
    """``import privauditor`` is the API (api/): its functions import what they need when called."""
    code = (
        "import sys, privauditor; print(sorted(privauditor.__all__)); "
        "print([m for m in ('torch', 'transformers', 'ray', 'peft') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names, loaded = out.strip().splitlines()[-2:]
    assert (
        names == "['AuditResult', 'Results', 'audit', 'audit_preview', 'load_results', 'run']"
        and loaded == "[]"
    )


def test_ruff_lints_and_formats_the_tree_cleanly():
    """``ruff check`` and ``ruff format --check`` over the repository (pyproject's rules), in CI."""
    for args in (["check", "--quiet", "."], ["format", "--check", "--quiet", "."]):
        done = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {args[0]}:\n{done.stdout[-2000:]}{done.stderr[-500:]}"
