"""``GET /telegram/selfcheck``: the strict readiness diagnosis (spec §1.5).

Four independent sections in a fixed order — environment, verification configuration, tables,
webhook — each adding human-readable items to ``failed``. Values of secrets are never echoed:
items name variables, never their contents.
"""

from __future__ import annotations

import logging
from itertools import combinations

from django.db import DatabaseError, transaction

from bots import texts
from bots.clients.telegram import TelegramError
from bots.conf import (
    NUMERIC_RULES,
    load_config,
    parse_admin_ids,
    parse_bot_language,
    parse_number,
    parse_public_base_url,
    parse_support_chat_id,
    raw_setting,
)
from bots.registration import webhook_url
from bots.results import EndpointResult
from bots.selectors import MODE_TURNSTILE, bot_tables_missing, verification_settings_get
from bots.verification.turnstile import button_origin
from bots.version import app_version

logger = logging.getLogger(__name__)

REQUIRED = (
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_WEBHOOK_SECRET",
    "ADMIN_SECRET",
    "SUPPORT_CHAT_ID",
    "ADMIN_IDS",
)
SECRETS = ("TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET", "ADMIN_SECRET")
# Cloudflare's documented Turnstile test keys: they let everybody pass.
TURNSTILE_TEST_SITE_KEYS = frozenset(
    {
        "1x00000000000000000000AA",
        "2x00000000000000000000AB",
        "3x00000000000000000000FF",
        "1x00000000000000000000BB",
        "2x00000000000000000000BB",
    }
)
TURNSTILE_TEST_SECRET_KEYS = frozenset(
    {
        "1x0000000000000000000000000000000AA",
        "2x0000000000000000000000000000000AA",
        "3x0000000000000000000000000000000AA",
    }
)


def environment_problems() -> list[str]:
    problems = []
    missing = [name for name in REQUIRED if raw_setting(name) is None]
    if missing:
        problems.append(texts.check_missing_required(missing))
    support_chat = raw_setting("SUPPORT_CHAT_ID")
    if support_chat is not None and parse_support_chat_id(support_chat) is None:
        problems.append(texts.check_support_chat_id_invalid())
    admin_ids_raw = raw_setting("ADMIN_IDS")
    if admin_ids_raw is not None:
        valid, invalid_positions = parse_admin_ids(admin_ids_raw)
        if not valid:
            problems.append(texts.check_admin_ids_none_valid())
        else:
            problems.extend(texts.check_admin_ids_token_invalid(p) for p in invalid_positions)
    for first, second in combinations(SECRETS, 2):
        first_value, second_value = raw_setting(first), raw_setting(second)
        if first_value is not None and first_value == second_value:
            problems.append(texts.check_secrets_equal(first, second))
    for rule in NUMERIC_RULES:
        raw = raw_setting(rule.name)
        if raw is not None and parse_number(raw, rule) is None:
            problems.append(texts.check_number_invalid(rule.name, rule.default))
    language = raw_setting("BOT_LANGUAGE")
    if language is not None and parse_bot_language(language) is None:
        problems.append(texts.check_bot_language_invalid())
    return problems


def verification_problems(origin: str | None = None) -> list[str]:
    """``origin``: where this selfcheck request arrived (the Turnstile page's origin when
    PUBLIC_BASE_URL is not set)."""
    problems = []
    site_key = raw_setting("TURNSTILE_SITE_KEY")
    secret_key = raw_setting("TURNSTILE_SECRET_KEY")
    if site_key is not None and secret_key is None:
        problems.append(
            texts.check_turnstile_half_configured("TURNSTILE_SITE_KEY", "TURNSTILE_SECRET_KEY")
        )
    if secret_key is not None and site_key is None:
        problems.append(
            texts.check_turnstile_half_configured("TURNSTILE_SECRET_KEY", "TURNSTILE_SITE_KEY")
        )
    try:
        # A savepoint, so a failed read leaves an enclosing transaction usable.
        with transaction.atomic():
            mode = verification_settings_get().mode
    except DatabaseError:
        logger.warning("selfcheck: settings unreadable", exc_info=True)
        problems.append(texts.check_settings_unreadable())
    else:
        if mode == MODE_TURNSTILE and (site_key is None or secret_key is None):
            problems.append(texts.check_turnstile_mode_without_keys())
        if mode == MODE_TURNSTILE and button_origin(load_config(), origin) is None:
            problems.append(texts.check_turnstile_no_https_origin())
    if site_key in TURNSTILE_TEST_SITE_KEYS:
        problems.append(texts.check_turnstile_test_key("TURNSTILE_SITE_KEY"))
    if secret_key in TURNSTILE_TEST_SECRET_KEYS:
        problems.append(texts.check_turnstile_test_key("TURNSTILE_SECRET_KEY"))
    public_base_url = raw_setting("PUBLIC_BASE_URL")
    if public_base_url is not None and parse_public_base_url(public_base_url) is None:
        problems.append(texts.check_public_base_url_invalid())
    return problems


def table_problems() -> list[str]:
    try:
        with transaction.atomic():
            missing = bot_tables_missing()
    except DatabaseError:
        logger.warning("selfcheck: table query failed", exc_info=True)
        return [texts.check_tables_unreadable()]
    return [texts.check_tables_missing(missing)] if missing else []


def webhook_problems(origin: str) -> list[str]:
    config = load_config()
    if not config.bot_token:
        return [texts.check_webhook_cannot_check()]
    client = config.telegram_client()
    try:
        info = client.get_webhook_info()
    except TelegramError as error:
        return [texts.check_webhook_info_failed(str(error))]
    info = info if isinstance(info, dict) else {}
    problems = []
    url = info.get("url") if isinstance(info.get("url"), str) else ""
    if not url:
        problems.append(texts.check_webhook_not_bound())
    elif url != webhook_url(config.public_base_url or origin):
        # setwebhook registers PUBLIC_BASE_URL's origin when it is set (behind a proxy the
        # selfcheck request's own origin may be another).
        problems.append(texts.check_webhook_points_elsewhere(url))
    last_error = info.get("last_error_message")
    if isinstance(last_error, str) and last_error:
        problems.append(texts.check_webhook_last_error(last_error))
    return problems


def selfcheck_run(*, origin: str) -> EndpointResult:
    """200 ``{"status":"ok","version"}`` or 503 with the ``failed`` items, in section order."""
    failed = [
        *environment_problems(),
        *verification_problems(origin),
        *table_problems(),
        *webhook_problems(origin),
    ]
    version = app_version()
    if failed:
        return EndpointResult(503, {"status": "error", "version": version, "failed": failed})
    return EndpointResult(200, {"status": "ok", "version": version})
