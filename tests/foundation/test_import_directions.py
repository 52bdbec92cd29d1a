"""The arrows of ARCHITECTURE.md: config wires the apps; telemetry imports neither product;
bots and proxy never import each other; no app imports config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "telemetry": {"proxy", "bots", "config"},
    "bots": {"proxy", "telemetry", "config"},
    "proxy": {"bots", "config"},
}


def _imported_top_level_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("app", sorted(FORBIDDEN))
def test_apps_import_only_what_the_architecture_allows(app):
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_top_level_packages(path) & FORBIDDEN[app])
        for path in (ROOT / app).rglob("*.py")
        if _imported_top_level_packages(path) & FORBIDDEN[app]
    }

    assert offenders == {}


# ------------------------------------------------------------------ no cycles

PACKAGES = ("bots", "proxy", "telemetry", "config")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its text (a function-level import is
    an import too: it only hides a cycle until that function runs). ``from a import b`` is an
    import of ``a.b`` when that is a module, else of ``a``; a type-checking-only import is not
    one (it never runs)."""
    tree = ast.parse(path.read_text())
    type_checking_only = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
        for child in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_checking_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {module for module in found if module in modules and module != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_import_graph_has_no_cycle():
    modules = _project_modules()
    graph = {name: _imports_of(name, path, modules) for name, path in modules.items()}

    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    graph = {"a.tasks": {"a.pipeline"}, "a.pipeline": {"a.tasks"}, "a.other": set()}

    assert _cycles(graph) == [["a.pipeline", "a.tasks"]]
