"""The shape ARCHITECTURE.md asks for, computed from the code: no import cycle anywhere in the
project, no module in ``proxy/`` past ~400 lines, HTTP to outside services only from
``clients/`` modules, and ``/v1`` views that neither branch on response types nor write the
ledger themselves."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "bots", "proxy", "telemetry", "config")
MAX_PROXY_MODULE_LINES = 420  # "~400": a module past it is split into a package
HTTP_LIBRARIES = {"aiohttp", "requests", "httpx", "urllib3", "urllib.request", "http.client"}
# Modules that import an HTTP library without calling an outside service, and why.
HTTP_WITHOUT_OUTSIDE_CALLS = {
    # Opens (and closes) the pooled aiohttp session per event loop; the calls are the Codex
    # client's (proxy/clients/codex/).
    "proxy/loop_resources.py",
    # Polls the project's own /healthz on 127.0.0.1 while starting the processes.
    "config/run.py",
    # Builds the apps' outgoing sessions (timeouts, trust_env, no retries); the calls are the
    # apps' clients/ modules.
    "common/outgoing_http.py",
}


def _source_files() -> dict[str, Path]:
    """Module name → file, for every module of the project's packages (migrations aside)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (top level, functions,
    ``TYPE_CHECKING`` blocks: a cycle hidden in a function is still a cycle)."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in modules:
                    edges.add(submodule)
                elif target in modules:
                    edges.add(target)
    edges.discard(name)
    return edges


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_the_import_reader_sees_function_level_and_type_checking_imports(tmp_path):
    """A cycle hidden in a function (it bites when the function first runs) or under
    ``TYPE_CHECKING`` (two modules that cannot be read apart) is still a cycle."""
    tasks = tmp_path / "tasks.py"
    tasks.write_text("def run():\n    from a import pipeline\n")
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a.tasks import run\n"
    )
    modules = {"a.tasks": tasks, "a.pipeline": pipeline}
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}

    assert graph == {"a.tasks": {"a.pipeline"}, "a.pipeline": {"a.tasks"}}
    assert import_cycles(graph) == [["a.pipeline", "a.tasks"]]


def test_no_import_cycle_anywhere_in_the_project_type_checking_imports_included():
    """Function-level imports and imports under ``TYPE_CHECKING`` count (issue 15's
    dispatcher ↔ upstream_request cycle was a TYPE_CHECKING one)."""
    modules = _source_files()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}

    assert import_cycles(graph) == []


def test_no_proxy_module_is_longer_than_about_400_lines():
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in (ROOT / "proxy").rglob("*.py")
        if "migrations" not in path.parts
        and (lines := len(path.read_text().splitlines())) > MAX_PROXY_MODULE_LINES
    }

    assert too_long == {}


def _http_libraries_imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            found |= {
                library
                for library in HTTP_LIBRARIES
                if name == library or name.startswith(f"{library}.")
            }
    return found


def test_outside_http_is_only_in_clients_modules():
    offenders = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if "clients" in relative.parts or str(relative) in HTTP_WITHOUT_OUTSIDE_CALLS:
                continue
            if libraries := _http_libraries_imported(path):
                offenders[str(relative)] = sorted(libraries)

    assert offenders == {}


def _view_findings(path: Path) -> list[str]:
    """``isinstance(…, HttpResponse)`` checks and ledger imports in a view module."""
    findings = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and "HttpResponse" in ast.unparse(node)
        ):
            findings.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            findings += [
                module
                for module in modules
                if module.startswith(("proxy.ledger", "proxy.dispatch.recording"))
            ]
    return findings


def test_the_view_check_sees_a_branch_and_a_ledger_import(tmp_path):
    view = tmp_path / "view.py"
    view.write_text(
        "from proxy.ledger import writer\n"
        "def serve(outcome):\n"
        "    if isinstance(outcome, HttpResponse):\n"
        "        return outcome\n"
    )
    assert _view_findings(view) == [
        "proxy.ledger",
        "proxy.ledger.writer",
        "isinstance(outcome, HttpResponse)",
    ]


def test_v1_views_neither_branch_on_response_types_nor_write_the_ledger():
    views = ("responses.py", "chat.py", "models.py", "websocket.py")
    findings = {name: _view_findings(ROOT / "proxy" / "v1" / name) for name in views}

    assert findings == {name: [] for name in views}
