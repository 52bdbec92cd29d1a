"""The bot's settings are read leniently (spec §1.3): bad values fall back, never raise."""

from __future__ import annotations

import os

import pytest

from bots.conf import (
    DEFAULT_MAX_ATTEMPTS,
    load_config,
    parse_admin_ids,
    parse_public_base_url,
    parse_support_chat_id,
    parse_welcome_text,
)
from tests.conftest import run_project


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("-1001234567890", -1001234567890),
        ("-100", None),  # the prefix alone is no chat
        ("-1234567890", None),  # a basic group, not a supergroup
        ("1001234567890", None),
        ("-100abc", None),
        ("-100" + "9" * 20, None),  # beyond the safe-integer range
        (None, None),
    ],
)
def test_support_chat_id_must_be_a_supergroup_id(raw, expected):
    assert parse_support_chat_id(raw) == expected


def test_admin_ids_skip_bad_tokens_and_report_their_positions():
    assert parse_admin_ids(" 111 , abc,222,,-5, 0 ,99999999999999999999") == (
        frozenset({111, 222}),
        [2, 5, 6, 7],
    )
    assert parse_admin_ids(None) == (frozenset(), [])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://support.example.com", "https://support.example.com"),
        ("https://support.example.com/", "https://support.example.com"),
        ("https://support.example.com:8443", "https://support.example.com:8443"),
        ("http://support.example.com", None),
        ("https://user:pass@support.example.com", None),
        ("https://support.example.com/bot", None),
        ("https://support.example.com/?a=1", None),
        ("https://support.example.com/#x", None),
        ("https://", None),
        ("https://support.example.com:99999", None),
        # One spelling for every use: the Mini App URL, the webhook URL, the checks.
        ("HTTPS://Support.Example.COM/", "https://support.example.com"),
        ("https://support.example.com:443", "https://support.example.com"),
        (" https://support.example.com/ ", "https://support.example.com"),
        ("https://[2001:db8::1]:8443/", "https://[2001:db8::1]:8443"),
        ("https://support.example.com//", None),
        ("ftp://support.example.com", None),
        ("support.example.com", None),
    ],
)
def test_public_base_url_accepts_only_a_bare_https_origin(raw, expected):
    assert parse_public_base_url(raw) == expected


def test_welcome_text_turns_literal_backslash_n_into_newlines():
    assert parse_welcome_text("Hi!\\nWrite to us.") == "Hi!\nWrite to us."
    assert parse_welcome_text("  \\n  ") is None
    assert parse_welcome_text(None) is None


def test_defaults_when_nothing_is_configured(settings):
    for name in (
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_WEBHOOK_SECRET",
        "ADMIN_SECRET",
        "SUPPORT_CHAT_ID",
        "ADMIN_IDS",
        "MAX_MESSAGES_PER_MINUTE",
        "VERIFY_TTL_HOURS",
        "MAX_ATTEMPTS",
        "WELCOME_TEXT",
        "PUBLIC_BASE_URL",
        "TELEGRAM_API_BASE",
    ):
        setattr(settings, name, None)

    config = load_config()

    assert config.bot_token is None
    assert config.support_chat_id is None
    assert config.admin_ids == frozenset()
    assert (config.max_messages_per_minute, config.verify_ttl_hours, config.max_attempts) == (
        20,
        0,
        3,
    )
    assert config.welcome_text is None
    assert config.telegram_api_base == "https://api.telegram.org"


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "2.5", " "])
def test_invalid_positive_numbers_fall_back_to_their_defaults(settings, raw):
    settings.MAX_ATTEMPTS = raw
    settings.MAX_MESSAGES_PER_MINUTE = raw

    config = load_config()

    assert config.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert config.max_messages_per_minute == 20


def test_verify_ttl_hours_accepts_zero_and_rejects_negative(settings):
    settings.VERIFY_TTL_HOURS = "0"
    assert load_config().verify_ttl_hours == 0
    settings.VERIFY_TTL_HOURS = "-3"
    assert load_config().verify_ttl_hours == 0
    settings.VERIFY_TTL_HOURS = "24"
    assert load_config().verify_ttl_hours == 24


@pytest.mark.subprocess
def test_bad_bot_variables_never_block_a_manage_py_command():
    environment = {
        "PATH": "/usr/bin:/bin",
        "SUPPORT_CHAT_ID": "not-a-chat",
        "ADMIN_IDS": "x,y",
        "MAX_ATTEMPTS": "many",
        "VERIFY_TTL_HOURS": "-1",
        "PUBLIC_BASE_URL": "ftp://nope",
        "REDIS_KEY_PREFIX": "cprtest:conf:",
    }
    for name in ("DATABASE_URL", "REDIS_URL", "CPR_VAR_DIR", "HOME"):
        if name in os.environ:
            environment[name] = os.environ[name]

    result = run_project("manage.py", "check", environment=environment)

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("raw", "pace"), [(None, 5), ("12", 12), ("0", 5), ("fast", 5)])
def test_the_bulk_deletion_pace_defaults_to_five_a_second(settings, raw, pace):
    settings.TELEGRAM_DELETES_PER_SECOND = raw

    assert load_config().deletes_per_second == pace


@pytest.mark.parametrize(
    ("raw", "cap"), [(None, 500), ("2000", 2000), ("0", 500), ("many", 500), ("-5", 500)]
)
def test_the_broadcast_recipient_cap_defaults_to_500(settings, raw, cap):
    settings.BROADCAST_MAX_RECIPIENTS = raw

    assert load_config().broadcast_max_recipients == cap


def test_selfcheck_names_an_invalid_broadcast_cap(settings):
    from bots.selfcheck import environment_problems

    settings.BROADCAST_MAX_RECIPIENTS = "lots"

    assert "BROADCAST_MAX_RECIPIENTS 的值无效，运行时按默认值 500 处理" in environment_problems()
