"""The markers `make test-fast` leaves out are declared, and the guard of
tests/process_markers.py knows which processes need which."""

from __future__ import annotations

import sys
import tomllib

from tests.conftest import PROJECT_ROOT
from tests.process_markers import _needed_marker


def test_the_markers_of_make_test_fast_are_declared():
    options = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    declared = {line.split(":")[0] for line in options["ini_options"]["markers"]}
    makefile = (PROJECT_ROOT / "Makefile").read_text()

    assert {"slow", "subprocess", "browser"} <= declared
    assert '-m "not slow and not subprocess and not browser"' in makefile


def test_a_python_process_needs_the_subprocess_marker_and_chromium_the_browser_one():
    assert _needed_marker([sys.executable, "-m", "celery", "-A", "config", "worker"]) == (
        "subprocess"
    )
    assert _needed_marker([sys.executable, "manage.py", "migrate"]) == "subprocess"
    assert _needed_marker(["/usr/bin/chromedriver", "--port=0"]) == "browser"
    assert _needed_marker(["/usr/bin/caddy", "run"]) is None
