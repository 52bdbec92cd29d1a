"""The README's run command, end to end: web + worker + beat, health, admin, one Ctrl-C."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from django.conf import settings

from config.embedded import free_port
from tests.conftest import PROJECT_ROOT, migrate_project, project_environment, run_project

pytestmark = pytest.mark.subprocess

ADMIN_PASSWORD = "e2e admin passphrase"


def _environment(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return project_environment(
        database_url,
        tmp_path,
        REDIS_KEY_PREFIX=f"{settings.REDIS_KEY_PREFIX}e2e:",
        WEB_WORKERS="1",
        CELERY_WORKER_CONCURRENCY="1",
        **extra,
    )


def _read_until(process: subprocess.Popen, pattern: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            seen += line
            if re.search(pattern, seen):
                return seen
        elif process.poll() is not None:
            break
    raise AssertionError(f"did not see {pattern!r} within {timeout}s; output so far:\n{seen}")


def test_run_all_serves_health_and_admin_and_stops_on_one_ctrl_c(scratch_database, tmp_path):
    port = free_port()
    environment = _environment(
        scratch_database, tmp_path, PORT=str(port), CPR_ADMIN_DEFAULT_PASSWORD=ADMIN_PASSWORD
    )
    environment.pop("PYTHONUNBUFFERED", None)  # `all` makes its children unbuffered itself
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "config.run", "all"],
        cwd=PROJECT_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output = _read_until(process, r"Stop:\s+Ctrl-C.*\n.*\n", timeout=150)
        assert f"Django admin:    http://127.0.0.1:{port}/admin/   (user 'admin')" in output
        # After the worker's and beat's own start-up banners, where it stays on screen; where
        # the admin password is, never the password.
        ready = output.index("Ready: web, worker and beat are running.")
        assert output.index("-------------- worker@") < ready
        assert output.index("celery beat v") < ready
        assert (
            "Admin password:  the value of CPR_ADMIN_DEFAULT_PASSWORD, unless it was changed since"
            in output
        )
        assert ADMIN_PASSWORD not in output
        assert "External PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)" in output

        base = f"http://127.0.0.1:{port}"
        health = requests.get(f"{base}/healthz", timeout=5)
        assert (health.status_code, health.content) == (204, b"")

        browser = requests.Session()
        login_page = browser.get(f"{base}/admin/login/", timeout=5)
        assert login_page.status_code == 200
        assert requests.get(f"{base}/static/admin/css/base.css", timeout=5).status_code == 200
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
        logged_in = browser.post(
            f"{base}/admin/login/?next=/admin/",
            data={"csrfmiddlewaretoken": token, "username": "admin", "password": ADMIN_PASSWORD},
            headers={"Referer": f"{base}/admin/login/"},
            timeout=10,
        )
        assert logged_in.url == f"{base}/admin/"
        assert "Site administration" in logged_in.text

        command_lines = [
            " ".join(child.cmdline())
            for child in psutil.Process(process.pid).children(recursive=True)
        ]
        assert any("uvicorn" in line or "config.run web" in line for line in command_lines)
        assert any("celery" in line and " worker" in line for line in command_lines)
        assert any("celery" in line and " beat" in line for line in command_lines)

        descendants = psutil.Process(process.pid).children(recursive=True)
        os.killpg(process.pid, signal.SIGINT)  # what one Ctrl-C in the terminal does
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 0
        # It says what it stops, then that it stopped and what it left running.
        assert "Stopping web, worker and beat" in rest
        assert (
            "Stopped web, worker and beat. External PostgreSQL (DATABASE_URL) and Redis "
            "(REDIS_URL): not ours to stop, left as they are." in rest
        )
        gone, alive = psutil.wait_procs(descendants, timeout=30)
        assert alive == []
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.parametrize("process_name", ["web", "worker", "beat"])
def test_processes_refuse_to_start_with_a_weak_default_password_but_manage_py_works(
    scratch_database, tmp_path, process_name
):
    environment = _environment(scratch_database, tmp_path, CPR_ADMIN_DEFAULT_PASSWORD="admin")
    migrate_project(environment)

    refused = run_project("-m", "config.run", process_name, environment=environment)
    assert refused.returncode == 2
    assert f"{process_name}: refusing to start" in refused.stderr
    assert "CPR_ADMIN_DEFAULT_PASSWORD is a well-known weak value" in refused.stderr


def test_processes_refuse_to_start_on_an_unmigrated_database(scratch_database, tmp_path):
    environment = _environment(
        scratch_database, tmp_path, CPR_ADMIN_DEFAULT_PASSWORD=ADMIN_PASSWORD
    )

    refused = run_project("-m", "config.run", "web", environment=environment)

    assert refused.returncode == 2
    assert "schema_migrations is missing; run `python manage.py migrate`" in refused.stderr
