"""`pip install -e .` (what `make run` and `make test` do first) and `pip install .` (the Docker
image) build without setuptools' package-discovery warnings (issue 38: three walls of "Package
'proxy.lua' is absent from the `packages` configuration" on every install), and the wheel still
carries every data file.

pip runs the build backend's hooks; this calls the same hooks (``setuptools.build_meta``'s
``build_wheel`` and ``build_editable``) in a copy of the shipped folders, so the project's own
folder gets no ``build/`` or ``*.egg-info``, and nothing is fetched from a registry."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.foundation.test_packaging import PROJECT_ROOT, SHIPPED_TOP_LEVEL

pytestmark = pytest.mark.subprocess

BUILD = """
import sys
import setuptools.build_meta as backend
print("WHEEL", backend.build_wheel(sys.argv[1]))
print("EDITABLE", backend.build_editable(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, Path]:
    """(the build's whole output, the wheel) of a copy of the project's shipped files."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    for top in SHIPPED_TOP_LEVEL:
        shutil.copytree(
            PROJECT_ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__")
        )
    wheels = tmp_path_factory.mktemp("wheels")
    finished = subprocess.run(
        [sys.executable, "-c", BUILD, str(wheels)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output
    wheel = next(line.split()[1] for line in finished.stdout.splitlines() if line[:6] == "WHEEL ")
    return output, wheels / wheel


def test_the_build_warns_of_no_package_left_out(built):
    output, _ = built

    assert "absent from the `packages` configuration" not in output
    assert "absent from setuptools' `packages` configuration" not in output
    assert "_Warning" not in output


def test_the_wheel_carries_every_data_file(built):
    _, wheel = built
    shipped = {
        str(path.relative_to(PROJECT_ROOT))
        for top in SHIPPED_TOP_LEVEL
        for path in (PROJECT_ROOT / top).rglob("*")
        if path.is_file() and path.suffix != ".pyc" and "__pycache__" not in path.parts
    }

    with zipfile.ZipFile(wheel) as archive:
        in_wheel = {name for name in archive.namelist() if ".dist-info/" not in name}

    assert shipped - in_wheel == set()
    assert {name for name in in_wheel if name.endswith(".lua")}  # the check proves something
