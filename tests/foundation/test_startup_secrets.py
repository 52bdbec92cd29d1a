"""Finding 7: start-up refuses an ADMIN_SECRET or TELEGRAM_WEBHOOK_SECRET under 16 characters."""

from __future__ import annotations

import pytest

from config.startup import (
    StartupRefused,
    ensure_bot_secrets_are_long_enough,
    ensure_public_base_url_is_an_https_origin,
)
from tests.conftest import project_environment, run_project


@pytest.mark.parametrize("name", ["ADMIN_SECRET", "TELEGRAM_WEBHOOK_SECRET"])
def test_a_short_bot_secret_stops_start_up(settings, name):
    setattr(settings, name, "fifteen-chars!!")

    with pytest.raises(StartupRefused, match=f"{name} must have at least 16 characters"):
        ensure_bot_secrets_are_long_enough()


def test_sixteen_characters_or_no_secret_at_all_start(settings):
    settings.ADMIN_SECRET = "sixteen-chars!!!"
    settings.TELEGRAM_WEBHOOK_SECRET = None

    assert ensure_bot_secrets_are_long_enough() is None


@pytest.mark.subprocess
def test_the_web_process_refuses_to_start_with_a_short_secret(tmp_path, settings):
    environment = project_environment(
        settings.DATABASE_URL, tmp_path, ADMIN_SECRET="short", TELEGRAM_WEBHOOK_SECRET="x" * 20
    )

    started = run_project("-m", "config.run", "web", environment=environment, timeout=60)

    assert started.returncode == 2
    assert "web: refusing to start: ADMIN_SECRET must have at least 16 characters" in (
        started.stderr
    )
    assert "short" not in started.stderr  # the value is never echoed


@pytest.mark.parametrize(
    "raw",
    ["http://support.example.com", "https://support.example.com/bot", "https://u:p@example.com"],
)
def test_a_public_base_url_telegram_cannot_use_stops_start_up(settings, raw):
    settings.PUBLIC_BASE_URL = raw

    with pytest.raises(
        StartupRefused, match="PUBLIC_BASE_URL must be a bare https origin"
    ) as refused:
        ensure_public_base_url_is_an_https_origin()

    assert raw not in str(refused.value)


@pytest.mark.parametrize("raw", [None, "https://support.example.com", "HTTPS://Example.com:443/"])
def test_an_https_origin_or_none_starts(settings, raw):
    settings.PUBLIC_BASE_URL = raw

    assert ensure_public_base_url_is_an_https_origin() is None
