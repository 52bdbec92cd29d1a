"""Finding 2 (Redis access): a Redis with a password refuses the project's clients without it
(cache, runtime state and Celery's broker alike), and the project with it works; compose's
Redis requires one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import PrivateRedis, project_environment, run_project

PASSWORD = "p@ss:w/rd #1 with spaces & symbols"
PROBE = """
import os
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
import django
from config.bootstrap import prepare
prepare()
django.setup()
from django_redis import get_redis_connection
from redis import AuthenticationError
from config.celery import app


def refused_for_the_password(error):
    while error is not None:  # kombu wraps redis-py's error in its own
        if isinstance(error, AuthenticationError):
            return True
        error = error.__cause__ or error.__context__
    return False


for name, check in (
    ("cache", lambda: get_redis_connection("default").set("cprtest:probe", "1")),
    ("celery", lambda: app.connection_for_write().default_channel.client.ping()),
):
    try:
        check()
        print(name, "ok")
    except Exception as error:
        print(name, "refused" if refused_for_the_password(error) else type(error).__name__)
"""


@pytest.fixture
def locked_redis(tmp_path):
    server = PrivateRedis(tmp_path, password=PASSWORD)
    yield server
    server.stop()


def _probe(tmp_path: Path, settings, **variables: str) -> list[str]:
    environment = project_environment(settings.DATABASE_URL, tmp_path, **variables)
    result = run_project("-c", PROBE, environment=environment, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.subprocess
def test_without_the_password_every_project_client_is_refused(locked_redis, tmp_path, settings):
    lines = _probe(tmp_path, settings, REDIS_URL=f"redis://127.0.0.1:{locked_redis.port}/0")

    assert lines == ["cache refused", "celery refused"]


@pytest.mark.subprocess
def test_with_redis_password_the_project_works(locked_redis, tmp_path, settings):
    lines = _probe(
        tmp_path,
        settings,
        REDIS_URL=f"redis://127.0.0.1:{locked_redis.port}/0",
        REDIS_PASSWORD=PASSWORD,
    )

    assert lines == ["cache ok", "celery ok"]


@pytest.mark.subprocess
def test_a_password_in_the_url_works_too_but_not_both(locked_redis, tmp_path, settings):
    assert _probe(tmp_path, settings, REDIS_URL=locked_redis.url) == ["cache ok", "celery ok"]

    environment = project_environment(
        settings.DATABASE_URL, tmp_path, REDIS_URL=locked_redis.url, REDIS_PASSWORD=PASSWORD
    )
    both = run_project("-c", PROBE, environment=environment, timeout=60)
    assert both.returncode != 0
    assert "REDIS_URL already holds a password" in both.stderr
    assert PASSWORD not in both.stderr


def test_compose_runs_redis_with_a_required_password_and_tls_cookie_defaults():
    compose = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text())
    redis_command = compose["services"]["redis"]["command"]
    environment = compose["x-app"]["environment"]

    assert redis_command[redis_command.index("--requirepass") + 1].startswith("${REDIS_PASSWORD:?")
    assert "ports" not in compose["services"]["redis"]
    assert environment["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert environment["SESSION_COOKIE_SECURE"] == "${SESSION_COOKIE_SECURE:-true}"
    assert environment["TRUST_CF_CONNECTING_IP"] == "${TRUST_CF_CONNECTING_IP:-false}"
    assert "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro" in compose["services"]["caddy"]["volumes"]
