"""Dependency audit of `make test`: pip-audit over the installed environment, failing on a known
vulnerability, wherever its vulnerability database can be reached.

pip-audit asks PyPI's per-release JSON API (``/pypi/<name>/<version>/json``) for advisories. Where
that API cannot be reached (a registry mirror that serves only the package index, no network),
the audit cannot run: this says so loudly on stderr, never silently, and exits 0 so that the rest
of `make test` runs, unless REQUIRE_DEPENDENCY_AUDIT=1 (then it fails). The floors in
pyproject.toml are kept past known CVEs by hand either way, and the tools no dependency names
(pip and setuptools, which every venv has) are checked against ``TOOL_FLOORS`` here, offline:
a venv below them fails the audit wherever it runs.

No package on PyPI ships a current advisory database for offline use (looked for in issue 35):
safety-db's last snapshot is from 2021; venvy, pysentry-rs and appthreat-vulnerability-db
download theirs (OSV's dump, GitHub's advisories) when they run, which fails here as pip-audit's
lookups do.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from importlib.metadata import PackageNotFoundError, version

# The first release of each past its known CVEs: pip 25.3 (CVE-2025-8869), setuptools 78.1.1
# (CVE-2024-6345, CVE-2025-47273; a new Python 3.11 venv has 65.5 — the Makefile upgrades it).
TOOL_FLOORS = {"pip": "25.3", "setuptools": "78.1.1"}

PROBE_URL = os.environ.get("CPR_AUDIT_PROBE_URL", "https://pypi.org/pypi/pip/{version}/json")


def vulnerability_database_problem() -> str | None:
    """Why pip-audit's database cannot be reached from here, or None when it can."""
    url = PROBE_URL.format(version=version("pip"))
    try:
        with urllib.request.urlopen(url, timeout=15) as answer:  # noqa: S310 - fixed https URL
            if answer.status == 200 and b'"vulnerabilities"' in answer.read():
                return None
            return f"{url} answered {answer.status} without advisories"
    except urllib.error.HTTPError as error:
        return f"{url} answered {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return f"{url} unreachable ({getattr(error, 'reason', error)})"


def tools_below_their_floors() -> list[str]:
    """``name version < floor`` for each of TOOL_FLOORS installed below its floor."""
    below = []
    for name, floor in TOOL_FLOORS.items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue
        if _release(installed) < _release(floor):
            below.append(f"{name} {installed} < {floor}")
    return below


def _release(text: str) -> tuple[int, ...]:
    """The release numbers of a version ("78.1.1" -> (78, 1, 1)); no third-party import, so
    the audit runs in a bare venv too."""
    numbers = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in numbers.group().split(".")) if numbers else (0,)


def main() -> int:
    below = tools_below_their_floors()
    if below:
        sys.stderr.write(
            "DEPENDENCY AUDIT FAILED: tools with known CVEs in this venv: "
            + ", ".join(below)
            + '\n  upgrade them: python -m pip install --upgrade pip "setuptools>=78.1.1"\n'
        )
        return 1
    print(f"offline floors: {', '.join(f'{n} >= {f}' for n, f in TOOL_FLOORS.items())}: ok")
    problem = vulnerability_database_problem()
    if problem is not None:
        banner = "!" * 78
        sys.stderr.write(
            f"{banner}\n"
            "DEPENDENCY AUDIT NOT RUN: pip-audit's vulnerability database is not reachable:\n"
            f"  {problem}\n"
            "No package on PyPI ships a current advisory database to audit offline (safety-db\n"
            "stops in 2021; the others download theirs at run time). The CVE floors in\n"
            "pyproject.toml (and pip/setuptools, checked above) are maintained by hand; run\n"
            "`make audit` where PyPI's JSON API is reachable.\n"
            f"{banner}\n"
        )
        return 1 if os.environ.get("REQUIRE_DEPENDENCY_AUDIT") == "1" else 0
    command = [sys.executable, "-m", "pip_audit", "--strict", "--skip-editable"]
    return subprocess.run([*command, "--progress-spinner", "off"], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
