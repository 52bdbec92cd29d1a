"""The real web process for the tests that attack it from outside: ``python -m config.run web``
(uvicorn configured as ``make run`` starts it) on this test's database and Redis, with one
worker — the process itself, so its memory can be read from ``/proc/<pid>/status``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import requests
from django.conf import settings
from django.db import connection

from config.embedded import database_url_for, free_port
from tests.conftest import PROJECT_ROOT, project_environment


class WebProcess:
    """``config.run web`` with ``WEB_WORKERS=1`` and ``variables`` in its environment, answering
    once its /healthz does; its output in ``log_path``."""

    def __init__(self, log_path: Path, upstream_url: str, **variables: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        environment = project_environment(
            database_url_for(settings.DATABASES["default"], connection.settings_dict["NAME"]),
            log_path.parent,
            CPR_ADMIN_DEFAULT_PASSWORD="edge attack passphrase",
            REDIS_KEY_PREFIX=settings.REDIS_KEY_PREFIX,
            CODEX_UPSTREAM_BASE=upstream_url,
            PORT=str(self.port),
            WEB_WORKERS="1",
            LOG_LEVEL="warning",
            **variables,
        )
        log = open(log_path, "w")  # noqa: SIM115 - the child owns it until it exits
        self.process = subprocess.Popen(
            [sys.executable, "-m", "config.run", "web"],
            cwd=PROJECT_ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                if requests.get(f"{self.url}/healthz", timeout=2).status_code == 204:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(log_path.read_text())
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _status_kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")

    def resident_bytes(self) -> int:
        """The worker's resident memory now (VmRSS)."""
        return self._status_kib("VmRSS") * 1024

    def peak_resident_bytes(self) -> int:
        """The most resident memory the worker ever had (VmHWM, the high-water mark)."""
        return self._status_kib("VmHWM") * 1024

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
