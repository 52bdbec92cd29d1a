"""`pip install .` (the Docker image) must ship every package of the project."""

from __future__ import annotations

import tomllib
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TOP_LEVEL = ("common", "config", "bots", "proxy", "telemetry")


def package_data_folders() -> set[str]:
    """Dotted names of the folders that hold files other than Python's (the Lua scripts, the
    catalogue, the dashboard's files): setuptools wants them listed as packages too."""
    return {
        ".".join(path.parent.relative_to(PROJECT_ROOT).parts)
        for top in SHIPPED_TOP_LEVEL
        for path in (PROJECT_ROOT / top).rglob("*")
        if path.is_file()
        and path.suffix not in (".py", ".pyc")
        and "__pycache__" not in path.parts
        and not (path.parent / "__init__.py").exists()
    }


def test_every_python_package_and_data_folder_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "packages"
        ]
    )
    on_disk = {
        ".".join(init.parent.relative_to(PROJECT_ROOT).parts)
        for top in SHIPPED_TOP_LEVEL
        for init in (PROJECT_ROOT / top).rglob("__init__.py")
    } | package_data_folders()

    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == set(), "these listed packages do not exist"


def _package_data_globs() -> dict[str, list[str]]:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]


def test_every_lua_script_ships_as_package_data():
    """The Redis scripts are read from their ``.lua`` files at import (common.redis_scripts): a
    wheel without one would not start."""
    globs = _package_data_globs()
    scripts = [
        path.relative_to(PROJECT_ROOT)
        for top in SHIPPED_TOP_LEVEL
        for path in (PROJECT_ROOT / top).rglob("*.lua")
    ]
    not_shipped = [
        str(script)
        for script in scripts
        if not any(
            script.relative_to(script.parts[0]).match(pattern)
            for pattern in globs.get(script.parts[0], [])
        )
    ]

    assert scripts, "no .lua file found: the check would prove nothing"
    assert not_shipped == []
