"""No import circle in the package: every module imports only modules below it (imports inside functions
count, since a lazy import that closes a loop is still a loop; ``if TYPE_CHECKING:`` imports count too, as
a circle there is one a type checker walks). And the folders are layers: each imports only its own
modules and those of the layers below it (:data:`LAYERS`, written once here)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"api": "privauditor", "tasks": "privauditor.tasks", "orchestrator": "privauditor.orchestrator"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found[".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return found


#: The folders' layers, bottom first: a folder imports its own modules and those of lower layers only, never
#: a folder of its own layer or above. In ``tasks/``: infrastructure at the floor, then statistics and the
#: plugin rooms that need no model pass, the data and training, the model passes, the views and attacks
#: that read them, the spec that resolves every plugin, the cell that runs a spec, and the audit (the results
#: store, ``tasks/infra/results.py``, is at the floor of all). The sweep file and the W&B mirror are the
#: orchestrator's floor; run, report, plan and board stand on them; the Python API and the command line on
#: top.
LAYERS = (
    ("tasks", "tasks.infra"),
    ("tasks.stats", "tasks.datasets", "tasks.models", "tasks.shipping"),
    ("tasks.leakage", "tasks.adaptations"),
    ("tasks.data",),
    ("tasks.training",),
    ("tasks.passes",),
    ("tasks.views", "tasks.defences"),
    ("tasks.attacks",),
    ("tasks.spec",),
    ("tasks.cell",),
    ("tasks.audit",),
    ("orchestrator.sweepfile", "orchestrator.tracking"),
    ("orchestrator.tables",),
    ("orchestrator.report", "orchestrator.plan"),
    ("orchestrator.run",),
    ("orchestrator.board",),
    ("api",),
    ("orchestrator.cli",),
)


def folder_of(module: str) -> str:
    """The layer unit of a module: ``tasks.<sub-package>`` (``tasks``: the package itself),
    ``orchestrator.<sub-package>``, ``orchestrator.tables``, ``orchestrator.cli`` (the cli modules), or
    ``api`` (the top-level package)."""
    parts = module.split(".")
    if parts[:2] == ["privauditor", "tasks"]:
        return "tasks" if len(parts) == 2 else f"tasks.{parts[2]}"
    if parts[:2] == ["privauditor", "orchestrator"]:
        if len(parts) == 2:
            return "orchestrator.tables"  # the package itself: a docstring, at the floor
        name = parts[2]
        return "orchestrator.cli" if name.startswith("cli") else f"orchestrator.{name}"
    return "api"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a folder of its own layer or above (other than its own folder)."""
    layer = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}
    found = []
    for name, targets in graph.items():
        source = folder_of(name)
        for target in sorted(targets):
            into = folder_of(target)
            if into != source and layer[into] >= layer[source]:
                found.append(f"{name} ({source}) imports {target} ({into})")
    return sorted(found)


def imported(name: str, path: Path, known: dict[str, Path], typing: bool = False) -> set[str]:
    """The package's modules that ``name`` imports (a ``from X import sub`` names the submodule); with
    ``typing``, also those imported only ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for statement in block.body
        for node in ast.walk(statement)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return (found & set(known)) - {name}


@pytest.mark.parametrize("typing", [False, True], ids=["at-run-time", "with-type-checking-imports"])
def test_the_import_graph_has_no_circle(typing):
    known = modules()
    graph = {name: imported(name, path, known, typing) for name, path in known.items()}
    assert len(graph) > 140 and graph["privauditor.tasks.audit.run"] >= {"privauditor.tasks.cell.run"}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None


def test_every_folder_imports_only_its_own_and_lower_layers():
    known = modules()
    assert {folder_of(name) for name in known} == {unit for units in LAYERS for unit in units}
    graph = {name: imported(name, path, known, typing=True) for name, path in known.items()}
    assert upward(graph) == []


def test_the_layer_check_finds_a_planted_upward_import():
    """A report module that imports the runner (a layer above it), the plan importing report (its own
    layer) and a model pass importing the cell: all found; the real graph with them planted fails the test
    above."""
    known = modules()
    graph = {name: imported(name, path, known, typing=True) for name, path in known.items()}
    graph["privauditor.orchestrator.report.findings"].add("privauditor.orchestrator.run.runner")
    graph["privauditor.orchestrator.plan.plan"].add("privauditor.orchestrator.report.leaderboard")
    graph["privauditor.tasks.passes.forward"].add("privauditor.tasks.cell.evaluate")
    assert upward(graph) == [
        "privauditor.orchestrator.plan.plan (orchestrator.plan) imports "
        "privauditor.orchestrator.report.leaderboard (orchestrator.report)",
        "privauditor.orchestrator.report.findings (orchestrator.report) imports "
        "privauditor.orchestrator.run.runner (orchestrator.run)",
        "privauditor.tasks.passes.forward (tasks.passes) imports privauditor.tasks.cell.evaluate (tasks.cell)",
    ]


#: files that may name ``cells/``: the store itself, and the board site, whose pages ``cells/<id>.html``
#: are its own layout, not a results folder's
OWNS_CELLS = {
    "tasks/infra/results.py": "the results store",
    "orchestrator/board/site.py": "the site's cell pages",
}


def cells_paths(path: Path) -> list[int]:
    """Lines of ``path`` that build a path into a results folder's ``cells/`` by hand: the string "cells"
    joined with ``/`` into a path, or a string or f-string naming ``cells/...`` (docstrings and prose
    aside)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }

    def names_cells(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value  # prose (help, messages) has spaces; a path does not
            return " " not in text and (
                text.startswith("cells/") or "/cells/" in text or text.endswith("/cells")
            )
        return False

    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if any(
                isinstance(side, ast.Constant) and side.value == "cells" for side in (node.left, node.right)
            ):
                found.add(node.lineno)
        elif isinstance(node, ast.JoinedStr):
            parts = [v for v in node.values if isinstance(v, ast.Constant)]
            if any(names_cells(p) for p in parts):
                found.add(node.lineno)
        elif names_cells(node):
            found.add(node.lineno)
    return sorted(found)


def test_only_the_store_builds_paths_into_cells(tmp_path):
    found = {}
    for folder in ("tasks", "orchestrator", "api", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative not in OWNS_CELLS and (lines := cells_paths(path)):
                found[relative] = lines
    assert found == {}, f"paths into cells/ built outside tasks/infra/results.py: {found}"
    planted = tmp_path / "planted.py"  # the check finds each way of building one
    planted.write_text(
        '"""cells/ in a docstring is fine."""\n'
        'a = out / "cells" / cell_id\n'
        'b = out.glob("cells/*/DONE")\n'
        'c = f"{root}/cells/{cell_id}/DONE"\n'
        'd = {"cells": 3}\n'
        'e = "no cells/ inside"\n'
    )
    assert cells_paths(planted) == [2, 3, 4]
