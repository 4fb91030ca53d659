"""No import circle in the package: every module imports only modules below it (imports inside functions
count, since a lazy import that closes a loop is still a loop; ``if TYPE_CHECKING:`` imports do not run)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"api": "privauditor", "tasks": "privauditor.tasks", "orchestrator": "privauditor.orchestrator"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found[".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports (a ``from X import sub`` names the submodule)."""
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
        if id(node) in typing_only:
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


def test_the_import_graph_has_no_circle():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert len(graph) > 140 and graph["privauditor.tasks.audit"] >= {"privauditor.tasks.cell"}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None
