"""`pip install .` (the Docker image) must ship every package of the project."""

from __future__ import annotations

import tomllib
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_TOP_LEVEL = ("config", "bots", "proxy", "telemetry")


def test_every_python_package_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "packages"
        ]
    )
    on_disk = {
        ".".join(init.parent.relative_to(PROJECT_ROOT).parts)
        for top in SHIPPED_TOP_LEVEL
        for init in (PROJECT_ROOT / top).rglob("__init__.py")
    }

    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == set(), "these listed packages do not exist"
