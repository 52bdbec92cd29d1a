"""Pytest plugin (``-p tests.process_markers``) keeping the ``subprocess`` and ``browser``
markers true: ``make test-fast`` leaves those tests out, so a test that starts a Python
process of the project (config.run, manage.py, celery, uvicorn, ``python -c``) without
``@pytest.mark.subprocess``, or Chromium without ``@pytest.mark.browser``, fails and says
which marker it needs. Session fixtures count for the test whose setup starts them.

Seen through the interpreter's ``subprocess.Popen`` audit event: nothing is patched.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

_started: list[list[str]] = []
_lock = threading.Lock()


def _remember_started_process(event: str, arguments: tuple) -> None:
    if event != "subprocess.Popen":
        return
    executable, argv = arguments[0], arguments[1]
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    command = [os.fsdecode(part) for part in (argv or [executable or ""])]
    with _lock:
        _started.append(command)


def _needed_marker(command: list[str]) -> str | None:
    program = os.path.basename(command[0]) if command else ""
    if command and command[0] == sys.executable:
        return "subprocess"
    if program.startswith(("chromium", "chromedriver")):
        return "browser"
    return None


def pytest_configure(config) -> None:
    sys.addaudithook(_remember_started_process)


def pytest_collection_finish(session) -> None:
    with _lock:
        _started.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Made right after each phase (setup, call, teardown): what started since the last one.
    outcome = yield
    with _lock:
        commands = list(_started)
        _started.clear()
    report = outcome.get_result()
    missing = sorted(
        {
            marker
            for marker in map(_needed_marker, commands)
            if marker is not None and item.get_closest_marker(marker) is None
        }
    )
    if missing and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} starts a process ({commands[0][:3]}) but is not marked"
            f" {', '.join('@pytest.mark.' + name for name in missing)} (pyproject.toml markers)"
        )
