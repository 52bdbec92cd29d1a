"""The real web process (``python -m config.run web``, uvicorn with the project's protocol and
limits, as ``make run`` starts it) on this test's committed database and this run's Redis, for
tests that attack it from outside over raw sockets and HTTP."""

from __future__ import annotations

import socket
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
    """``config.run web`` with ``variables`` on top of the test environment (one worker unless
    ``WEB_WORKERS`` says otherwise), answering once ``/healthz`` is 204. Its output goes to
    ``log_path``; ``log()`` reads it."""

    def __init__(self, tmp_path: Path, **variables: str) -> None:
        self.port = free_port()
        self.log_path = tmp_path / f"web-{self.port}.log"
        defaults = {
            "REDIS_KEY_PREFIX": settings.REDIS_KEY_PREFIX,
            # The test's key: admin sessions made by the test are signed with it.
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "CPR_ADMIN_DEFAULT_PASSWORD": "web process test passphrase",
            "PORT": str(self.port),
            "WEB_WORKERS": "1",
        }
        environment = project_environment(
            database_url_for(settings.DATABASES["default"], connection.settings_dict["NAME"]),
            tmp_path,
            **{**defaults, **variables},
        )
        log = open(self.log_path, "w")  # noqa: SIM115 - the child owns it until it exits
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
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"web did not start:\n{self.log()}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, timeout: float = 10) -> socket.socket:
        """A raw TCP connection to the web process."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def healthz_status(self) -> int:
        return requests.get(f"{self.url}/healthz", timeout=5).status_code

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _status_kib(self, field: str) -> int:
        """A field of ``/proc/<pid>/status`` in KiB (with one worker, the process is it)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")

    def resident_bytes(self) -> int:
        """The worker's resident memory now (VmRSS)."""
        return self._status_kib("VmRSS") * 1024

    def peak_resident_bytes(self) -> int:
        """The most resident memory the worker ever had (VmHWM, its high-water mark)."""
        return self._status_kib("VmHWM") * 1024

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def read_until_closed(connection_: socket.socket, *, limit: int = 1 << 20) -> bytes:
    """Everything the server sends on ``connection_`` until it closes it (or ``limit`` bytes);
    raises socket.timeout when the server neither sends nor closes within the socket's
    timeout."""
    received = bytearray()
    while len(received) < limit:
        try:
            chunk = connection_.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return bytes(received)


def status_of(answer: bytes) -> int | None:
    """The status code of a raw HTTP answer, None when there is none."""
    if not answer.startswith(b"HTTP/1."):
        return None
    return int(answer.split(b" ", 2)[1])
