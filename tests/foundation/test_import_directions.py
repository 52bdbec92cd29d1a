"""The arrows of ARCHITECTURE.md: config wires the apps; telemetry imports neither product;
bots and proxy never import each other; no app imports config; common (the plumbing every app
shares) imports no app. (No import cycle at all:
``test_code_structure``.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "common": {"proxy", "bots", "telemetry", "config"},
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


# Import cycles (function-level and TYPE_CHECKING imports included) are checked by
# tests/foundation/test_code_structure.py.
