"""Settings come from the environment; a malformed value stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess

import pytest

from config.env import (
    InvalidEnvironmentValue,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_networks,
    env_str,
)
from tests.conftest import run_project


def test_env_int_reads_value_and_default():
    assert env_int("PORT", 8000, environ={"PORT": " 9001 "}) == 9001
    assert env_int("PORT", 8000, environ={}) == 8000
    assert env_int("PORT", 8000, environ={"PORT": ""}) == 8000


@pytest.mark.parametrize("raw", ["abc", "12.5", "0x10", "8o00"])
def test_env_int_rejects_non_integers_naming_the_variable(raw):
    with pytest.raises(InvalidEnvironmentValue, match=r"^PORT must be an integer"):
        env_int("PORT", 8000, environ={"PORT": raw})


def test_env_int_enforces_range():
    with pytest.raises(InvalidEnvironmentValue, match="PORT must be <= 65535, got 70000"):
        env_int("PORT", 8000, minimum=1, maximum=65535, environ={"PORT": "70000"})
    with pytest.raises(InvalidEnvironmentValue, match="ADMIN_SESSION_TTL_MINUTES must be >= 1"):
        env_int(
            "ADMIN_SESSION_TTL_MINUTES", 1440, minimum=1, environ={"ADMIN_SESSION_TTL_MINUTES": "0"}
        )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        ("0", False),
        ("False", False),
        ("off", False),
    ],
)
def test_env_bool_accepts_usual_words(raw, expected):
    assert env_bool("DEBUG", not expected, environ={"DEBUG": raw}) is expected


def test_env_bool_rejects_other_words():
    with pytest.raises(InvalidEnvironmentValue, match="DEBUG must be a boolean.*'maybe'"):
        env_bool("DEBUG", False, environ={"DEBUG": "maybe"})


def test_env_list_and_str():
    assert env_list(
        "ALLOWED_HOSTS", ["x"], environ={"ALLOWED_HOSTS": " a.example, ,b.example "}
    ) == [
        "a.example",
        "b.example",
    ]
    assert env_list("ALLOWED_HOSTS", ["x"], environ={}) == ["x"]
    assert env_str("REDIS_KEY_PREFIX", "cpr:", environ={"REDIS_KEY_PREFIX": "  "}) == "cpr:"


def test_env_networks_parses_and_rejects():
    networks = env_networks(
        "TRUSTED_PROXIES", environ={"TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1,::1"}
    )
    assert [str(network) for network in networks] == ["10.0.0.0/8", "127.0.0.1/32", "::1/128"]
    with pytest.raises(InvalidEnvironmentValue, match="TRUSTED_PROXIES .* 'nginx'"):
        env_networks("TRUSTED_PROXIES", environ={"TRUSTED_PROXIES": "nginx"})


def test_env_choice():
    assert (
        env_choice("LOG_LEVEL", "info", ("debug", "info"), environ={"LOG_LEVEL": "DEBUG"})
        == "debug"
    )
    with pytest.raises(InvalidEnvironmentValue, match="LOG_LEVEL must be one of debug, info"):
        env_choice("LOG_LEVEL", "info", ("debug", "info"), environ={"LOG_LEVEL": "loud"})


def _manage(*arguments: str, **environment: str) -> subprocess.CompletedProcess:
    return run_project("manage.py", *arguments, environment={**os.environ, **environment})


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("PORT", "eighty", "PORT must be an integer, got 'eighty'"),
        ("DEBUG", "perhaps", "DEBUG must be a boolean"),
        ("ADMIN_SESSION_TTL_MINUTES", "-5", "ADMIN_SESSION_TTL_MINUTES must be >= 1"),
        ("TRUSTED_PROXIES", "not-an-ip", "TRUSTED_PROXIES must list IP addresses"),
        ("DATABASE_URL", "mysql://u@h/db", "DATABASE_URL must be a postgres"),
    ],
)
def test_bad_value_stops_start_up_with_the_variable_named(variable, value, message):
    result = _manage("check", **{variable: value})
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.subprocess
def test_good_environment_passes_django_checks():
    result = _manage("check", PORT="8123", DEBUG="0")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
