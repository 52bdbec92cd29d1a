"""The shape ARCHITECTURE.md asks for, computed from the code: no import cycle anywhere in the
project, proxy/'s floors imported only downwards (nothing below the orchestrator imports
``proxy.dispatch``), no module of any app past ~400 lines, no module named like a standard
library module, HTTP to outside services only from ``clients/`` modules, and ``/v1`` views that
neither branch on response types nor write the ledger themselves."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "bots", "proxy", "telemetry", "config")
MAX_MODULE_LINES = 420  # "~400": a module past it is split into a package
# Modules allowed past it, and why: text catalogues, which a split would only scatter.
LONG_TEXT_CATALOGUES = {
    # Every text the bot shows, one small function per message; bots/locale's .po file mirrors it.
    "bots/texts.py",
}
# Standard-library names a module may still have, and why.
STDLIB_NAMES_ALLOWED = {
    # The house style's name for an app's reads (ARCHITECTURE.md, HackSoft's styleguide); only
    # ever imported by its dotted path (``proxy.selectors``, ``bots.selectors``).
    "selectors",
}
# proxy/'s floors, lowest first: a module imports only from its own floor or the ones below.
# A module's floor is that of its longest listed prefix (names relative to ``proxy.``).
PROXY_FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "base: models and the small helpers everything uses",
        frozenset(
            {
                "",  # proxy/__init__.py
                "admin_secrets",
                "background",
                "catalog_cache",
                # the one outgoing-session policy of the proxy, which loop_resources opens
                "clients.outgoing",
                "identifiers",
                "identity",
                "json_parse",
                "loop_resources",
                "model_constraints",
                "models",
                "models_admin",
                "models_catalog",
                "models_policies",
                "password_validation",
                "redis_keys",
                "storable_text",
                "token_claims",
            }
        ),
    ),
    (
        "outside: the upstream clients, the Redis runtime state, accounts and quotas",
        frozenset({"accounts", "clients", "quota", "runtime_state"}),
    ),
    (
        "domain: the vocabulary the orchestrator and the ledger share",
        frozenset({"domain"}),
    ),
    (
        "services: key policies, scheduling, the ledger, writes, reads, tasks",
        frozenset(
            {
                "chat",
                "daily_burn",
                "ledger",
                "metrics.instruments",
                "metrics.recording",
                "policies",
                "pool_snapshot",
                "scheduling",
                "selectors",
                "services",
                "sessions",
                "tasks",
            }
        ),
    ),
    ("dispatch: the orchestrator", frozenset({"dispatch"})),
    (
        "surfaces: /v1, the admin API and console, metrics pages, commands, wiring",
        frozenset(
            {
                "admin",
                "admin_account_actions",
                "admin_account_forms",
                "admin_account_policy",
                "admin_accounts_glance",
                "admin_api",
                "admin_key_policy",
                "admin_keys",
                "admin_pages",
                "admin_request_detail",
                "admin_request_filters",
                "admin_requests",
                "admin_settings",
                "admin_site",
                "admin_usage",
                "apps",
                "auth_backend",
                "forms",
                "lifecycle",
                "management",
                "metrics",
                "urls",
                "v1",
            }
        ),
    ),
)
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


def proxy_floor(module: str) -> int | None:
    """The index in ``PROXY_FLOORS`` of a ``proxy`` module (None: on no floor)."""
    relative = module.removeprefix("proxy").removeprefix(".")
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(PROXY_FLOORS)
        for prefix in prefixes
        if relative == prefix or (prefix and relative.startswith(f"{prefix}."))
    ]
    return max(matches)[1] if matches else None


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) of every import in proxy/ from a lower floor to a higher one."""
    found = []
    for importer, imported in sorted(graph.items()):
        if not importer.startswith("proxy"):
            continue
        low = proxy_floor(importer)
        for target in sorted(imported):
            if target.startswith("proxy") and low is not None:
                high = proxy_floor(target)
                if high is not None and high > low:
                    found.append((importer, target))
    return found


def test_the_floor_check_sees_an_import_from_below_the_orchestrator():
    graph = {
        "proxy.ledger.entries": {"proxy.dispatch.dispatcher", "proxy.domain.sse"},
        "proxy.dispatch.dispatcher": {"proxy.ledger.entries"},
        "proxy.domain.sse": {"proxy.json_parse"},
    }

    assert proxy_floor("proxy") == 0
    assert proxy_floor("proxy.metrics.recording") == 3
    assert proxy_floor("proxy.metrics.views") == 5
    assert upward_imports(graph) == [("proxy.ledger.entries", "proxy.dispatch.dispatcher")]


def _project_graph() -> dict[str, set[str]]:
    modules = _source_files()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_proxy_module_is_on_a_floor():
    unplaced = sorted(
        name for name in _source_files() if name.startswith("proxy") and proxy_floor(name) is None
    )

    assert unplaced == []


def test_proxy_imports_run_only_down_its_floors():
    """Nothing under ledger/, policies/, services/, scheduling/ or domain/ imports
    proxy.dispatch (the orchestrator stands on them, not they on it), and no floor reaches up."""
    assert upward_imports(_project_graph()) == []


def test_neither_telemetry_nor_config_imports_the_orchestrator():
    """telemetry/ and config/ import nothing of proxy.dispatch (config builds the /v1 handler,
    which stands on it)."""
    offenders = sorted(
        (importer, target)
        for importer, imported in _project_graph().items()
        if importer.startswith(("telemetry", "config"))
        for target in imported
        if target == "proxy.dispatch" or target.startswith("proxy.dispatch.")
    )

    assert offenders == []


def test_no_module_of_any_app_is_longer_than_about_400_lines():
    too_long = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
        and str(path.relative_to(ROOT)) not in LONG_TEXT_CATALOGUES
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }

    assert too_long == {}


def test_no_module_is_named_like_a_standard_library_module():
    """Run as a script from its folder, a ``copy.py`` or ``types.py`` would be what the
    standard library's own imports find; a name of our own says what the module holds."""
    shadowing = sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
        and (path.parent.name if path.name == "__init__.py" else path.stem)
        in sys.stdlib_module_names - STDLIB_NAMES_ALLOWED
    )

    assert shadowing == []


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


def _defaults_bound_to_timezone_now(source: str) -> list[int]:
    """Lines where ``timezone.now`` itself is a function's default or a dataclass field's
    default_factory: bound once, at import, to whatever ``timezone.now`` was then."""

    def is_timezone_now(node: ast.AST | None) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "now"
            and isinstance(node.value, ast.Name)
            and node.value.id == "timezone"
        )

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            defaults = [*node.args.defaults, *node.args.kw_defaults]
            lines += [default.lineno for default in defaults if is_timezone_now(default)]
        elif (
            isinstance(node, ast.keyword)
            and node.arg == "default_factory"
            and is_timezone_now(node.value)
        ):
            lines.append(node.value.lineno)
    return lines


def test_the_default_check_sees_a_parameter_and_a_field_bound_to_timezone_now():
    source = (
        "def drain(*, clock=timezone.now): ...\n"
        "started_at: datetime = field(default_factory=timezone.now)\n"
        "def fine(*, clock=clock.now, at=None): return timezone.now()\n"
    )
    assert _defaults_bound_to_timezone_now(source) == [1, 2]


def test_no_default_is_bound_to_timezone_now_at_import():
    """A test that moves ``timezone.now`` (monkeypatch) while such a module is first imported
    leaves the moved clock in that default for the rest of the process: the inbox's drain kept
    a test's 2026-10-01 and found no row ever due. ``common.clock.now`` looks it up per call."""
    offenders = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if (lines := _defaults_bound_to_timezone_now(path.read_text()))
    }

    assert offenders == {}
