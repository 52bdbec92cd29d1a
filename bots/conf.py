"""The bot's configuration, parsed leniently from the raw strings of ``config/settings_bot.py``.

Spec §1.3: at runtime a missing or malformed value never stops anything — invalid optional values
fall back to their defaults, an invalid SUPPORT_CHAT_ID makes every update ``ignore`` (fail
closed), bad ADMIN_IDS tokens are skipped. ``GET /telegram/selfcheck`` diagnoses the same raw
values strictly (``bots.selfcheck``) with the parsers below, so both paths agree on what is valid.

Settings are read on every call (no module-level cache), so a changed setting takes effect at
once and tests can override them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from bots.clients.telegram import TelegramClient
from bots.outbound.limiter import TELEGRAM_LIMITS, Limits, OutboundLimiter
from bots.outbound.paced import PacedTelegramClient

# JavaScript's Number.MAX_SAFE_INTEGER: the original's bound for ids read from text.
MAX_SAFE_INTEGER = 2**53 - 1

DEFAULT_MAX_MESSAGES_PER_MINUTE = 20
DEFAULT_VERIFY_TTL_HOURS = 0
DEFAULT_MAX_ATTEMPTS = 3
# deleteMessage / deleteForumTopic calls per second into the support group during /purgemsg and
# /wipealldata. Telegram documents no number for deletions; its per-chat guidance for sending is
# about one message per second with short bursts allowed. Five a second stays well clear of
# flood control in practice, and a 429's retry_after is honoured on top.
DEFAULT_TELEGRAM_DELETES_PER_SECOND = 5
# The most eligible users a /broadcast may go to (spec §11: the original's cap). Raising it is the
# way past the original's limit: the send loop runs in Celery, paced and resumable.
DEFAULT_BROADCAST_MAX_RECIPIENTS = 500
# The shared outbound limiter (bots.outbound.limiter): Telegram's limits, and how long one
# webhook update (or one console action) may wait for its send permits before it is answered
# 500 for Telegram to redeliver (well inside the 60 s Telegram waits for an answer).
DEFAULT_TELEGRAM_SENDS_PER_SECOND = TELEGRAM_LIMITS.per_second
DEFAULT_TELEGRAM_CHAT_INTERVAL_MS = round(TELEGRAM_LIMITS.chat_interval * 1000)
DEFAULT_TELEGRAM_GROUP_SENDS_PER_WINDOW = TELEGRAM_LIMITS.group_per_window
DEFAULT_TELEGRAM_GROUP_WINDOW_SECONDS = round(TELEGRAM_LIMITS.group_window)
DEFAULT_TELEGRAM_SEND_BUDGET_MS = 5000
# How long the audit trail of admin actions is kept (trimmed daily).
DEFAULT_AUDIT_RETENTION_DAYS = 365
DEFAULT_TELEGRAM_API_BASE = "https://api.telegram.org"
# The Turnstile web verification's outside parts (spec §5.5, §8.4). Settings, so that tests (and
# the page in a browser) run against local fakes.
DEFAULT_TURNSTILE_VERIFY_URL = "https://challenges.cloudflare.com/turnstile/v0/siteverify"
DEFAULT_TURNSTILE_SCRIPT_URL = "https://challenges.cloudflare.com/turnstile/v0/api.js"
DEFAULT_TELEGRAM_WEBAPP_SCRIPT_URL = "https://telegram.org/js/telegram-web-app.js"
# The language of everything the bot says (bots.texts): Chinese, the original's language and the
# source text of the catalogue, or English.
DEFAULT_BOT_LANGUAGE = "zh"
BOT_LANGUAGES = ("zh", "en")

_DIGITS = re.compile(r"[0-9]+")
_SUPPORT_CHAT_ID = re.compile(r"-100[0-9]+")


@dataclass(frozen=True)
class NumberRule:
    """How an optional numeric variable is read: its default and smallest accepted value."""

    name: str
    default: int
    minimum: int


NUMERIC_RULES = (
    NumberRule("MAX_MESSAGES_PER_MINUTE", DEFAULT_MAX_MESSAGES_PER_MINUTE, 1),
    NumberRule("VERIFY_TTL_HOURS", DEFAULT_VERIFY_TTL_HOURS, 0),
    NumberRule("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS, 1),
    NumberRule("TELEGRAM_DELETES_PER_SECOND", DEFAULT_TELEGRAM_DELETES_PER_SECOND, 1),
    NumberRule("BROADCAST_MAX_RECIPIENTS", DEFAULT_BROADCAST_MAX_RECIPIENTS, 1),
    NumberRule("TELEGRAM_SENDS_PER_SECOND", DEFAULT_TELEGRAM_SENDS_PER_SECOND, 1),
    NumberRule("TELEGRAM_CHAT_INTERVAL_MS", DEFAULT_TELEGRAM_CHAT_INTERVAL_MS, 0),
    NumberRule("TELEGRAM_GROUP_SENDS_PER_WINDOW", DEFAULT_TELEGRAM_GROUP_SENDS_PER_WINDOW, 1),
    NumberRule("TELEGRAM_GROUP_WINDOW_SECONDS", DEFAULT_TELEGRAM_GROUP_WINDOW_SECONDS, 1),
    NumberRule("TELEGRAM_SEND_BUDGET_MS", DEFAULT_TELEGRAM_SEND_BUDGET_MS, 0),
    NumberRule("AUDIT_RETENTION_DAYS", DEFAULT_AUDIT_RETENTION_DAYS, 1),
)


@dataclass(frozen=True)
class BotConfig:
    bot_token: str | None
    webhook_secret: str | None
    admin_secret: str | None
    support_chat_id: int | None  # None when SUPPORT_CHAT_ID is missing or invalid
    admin_ids: frozenset[int]
    max_messages_per_minute: int
    verify_ttl_hours: int
    max_attempts: int
    deletes_per_second: int  # pace of bulk deletions into the support group (purge, wipe)
    broadcast_max_recipients: int  # the most eligible users a /broadcast may go to
    outbound_limits: Limits  # Telegram's limits, as the shared outbound limiter keeps them
    send_budget_seconds: float  # how long one update may wait for its send permits
    audit_retention_days: int  # how long admin_audit_log rows are kept
    welcome_text: str | None  # None: the built-in welcome (bots.texts)
    turnstile_site_key: str | None
    turnstile_secret_key: str | None
    public_base_url: str | None  # a validated https origin, or None
    telegram_api_base: str
    turnstile_verify_url: str
    turnstile_script_url: str
    telegram_webapp_script_url: str

    def is_admin(self, user_id: int) -> bool:
        return user_id in self.admin_ids

    @property
    def bot_id(self) -> int | None:
        """The bot's id: the digits before the token's colon (None without a usable token)."""
        head = (self.bot_token or "").partition(":")[0]
        return int(head) if _DIGITS.fullmatch(head) else None

    def telegram_client(
        self,
        *,
        in_place_retry: bool = True,
        paced: bool = True,
        budget_seconds: float | None = None,
        guard: Callable[[], None] | None = None,
    ) -> TelegramClient:
        """The Bot API client of this configuration. Callers check ``bot_token`` first.

        ``paced`` (the default): every send, edit and deletion takes a permit from the shared
        outbound limiter first (``bots.outbound.paced``), waiting at most ``budget_seconds``
        for all of them together (None: a job's per-call wait). ``paced=False`` only for a
        caller that takes its permits itself (the broadcast's send loop).
        ``in_place_retry=False``: a 429 is raised at once (a paced sender hands its retry_after
        to the shared limiter instead of retrying on its own). ``guard``: run before every
        call of a paced client (an update's inbox lease, ``bots.outbound.paced``)."""
        if not self.bot_token:
            raise ValueError("TELEGRAM_BOT_TOKEN is not set")
        options: dict[str, Any] = {
            "token": self.bot_token,
            "api_base": self.telegram_api_base,
            "in_place_retry": in_place_retry,
        }
        bot_id = self.bot_id
        if not paced or bot_id is None:
            return TelegramClient(**options)
        return PacedTelegramClient(
            limiter=self.outbound_limiter(bot_id),
            budget_seconds=budget_seconds,
            guard=guard,
            **options,
        )

    def outbound_limiter(self, bot_id: int) -> OutboundLimiter:
        """The shared limiter of ``bot_id`` with this configuration's limits."""
        return OutboundLimiter(bot_id=bot_id, limits=self.outbound_limits)


def raw_setting(name: str) -> str | None:
    """The setting's value trimmed, or None when unset or empty (selfcheck diagnoses these
    strictly; ``load_config`` parses them leniently)."""
    value = getattr(settings, name, None)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def parse_safe_integer(text: str) -> int | None:
    """A string of decimal digits within the safe-integer range, as an int; else None."""
    if not _DIGITS.fullmatch(text):
        return None
    number = int(text)
    return number if number <= MAX_SAFE_INTEGER else None


def parse_support_chat_id(raw: str | None) -> int | None:
    """A supergroup id (``-100…``, negative, safe integer), or None when missing or invalid."""
    if raw is None or not _SUPPORT_CHAT_ID.fullmatch(raw):
        return None
    magnitude = parse_safe_integer(raw[1:])
    return None if magnitude is None else -magnitude


def parse_admin_ids(raw: str | None) -> tuple[frozenset[int], list[int]]:
    """The valid admin ids, and the 1-based positions of the tokens that are not.

    Tokens are trimmed; empty tokens (``1,2,``) are ignored; a token must be a positive safe
    integer.
    """
    if raw is None:
        return frozenset(), []
    valid: set[int] = set()
    invalid_positions: list[int] = []
    for position, token in enumerate(raw.split(","), start=1):
        token = token.strip()
        if not token:
            continue
        number = parse_safe_integer(token)
        if number is None or number == 0:
            invalid_positions.append(position)
        else:
            valid.add(number)
    return frozenset(valid), invalid_positions


def parse_number(raw: str | None, rule: NumberRule) -> int | None:
    """The variable as an int when present and valid; None when present but invalid.

    Absent variables give the rule's default.
    """
    if raw is None:
        return rule.default
    number = parse_safe_integer(raw)
    if number is None or number < rule.minimum:
        return None
    return number


def parse_public_base_url(raw: str | None) -> str | None:
    """``https://host[:port]`` when PUBLIC_BASE_URL is a bare https origin, else None.

    Normalised, so that the Mini App URL, the webhook URL and the origin and hostname checks
    all see one spelling: surrounding spaces and a trailing ``/`` dropped, scheme and host in
    lower case, the default port 443 left out. Rejected (spec §1.3): another scheme,
    credentials, a query or fragment, a path other than ``/``.
    """
    if raw is None:
        return None
    raw = raw.strip()
    if "?" in raw or "#" in raw:
        return None
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() != "https" or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    if parts.path not in ("", "/"):
        return None
    host = parts.hostname  # lower case
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    return f"https://{host}" if port in (None, 443) else f"https://{host}:{port}"


def parse_welcome_text(raw: str | None) -> str | None:
    """The custom welcome with literal ``\\n`` turned into newlines; None for the default."""
    if raw is None:
        return None
    text = raw.replace("\\n", "\n").strip()
    return text or None


def parse_bot_language(raw: str | None) -> str | None:
    """``zh`` or ``en`` (any letter case); the default when unset; None when present but unknown."""
    if raw is None:
        return DEFAULT_BOT_LANGUAGE
    language = raw.lower()
    return language if language in BOT_LANGUAGES else None


def bot_language() -> str:
    """The language the bot speaks: BOT_LANGUAGE, or ``zh`` when it is unset or unknown."""
    return parse_bot_language(raw_setting("BOT_LANGUAGE")) or DEFAULT_BOT_LANGUAGE


def _number_or_default(rule: NumberRule) -> int:
    parsed = parse_number(raw_setting(rule.name), rule)
    return rule.default if parsed is None else parsed


def load_config() -> BotConfig:
    """Parse the bot's settings leniently (never raises)."""
    numbers = {rule.name: _number_or_default(rule) for rule in NUMERIC_RULES}
    api_base = raw_setting("TELEGRAM_API_BASE") or DEFAULT_TELEGRAM_API_BASE
    return BotConfig(
        bot_token=raw_setting("TELEGRAM_BOT_TOKEN"),
        webhook_secret=raw_setting("TELEGRAM_WEBHOOK_SECRET"),
        admin_secret=raw_setting("ADMIN_SECRET"),
        support_chat_id=parse_support_chat_id(raw_setting("SUPPORT_CHAT_ID")),
        admin_ids=parse_admin_ids(raw_setting("ADMIN_IDS"))[0],
        max_messages_per_minute=numbers["MAX_MESSAGES_PER_MINUTE"],
        verify_ttl_hours=numbers["VERIFY_TTL_HOURS"],
        max_attempts=numbers["MAX_ATTEMPTS"],
        deletes_per_second=numbers["TELEGRAM_DELETES_PER_SECOND"],
        broadcast_max_recipients=numbers["BROADCAST_MAX_RECIPIENTS"],
        outbound_limits=Limits(
            per_second=numbers["TELEGRAM_SENDS_PER_SECOND"],
            chat_interval=numbers["TELEGRAM_CHAT_INTERVAL_MS"] / 1000,
            group_per_window=numbers["TELEGRAM_GROUP_SENDS_PER_WINDOW"],
            group_window=float(numbers["TELEGRAM_GROUP_WINDOW_SECONDS"]),
        ),
        send_budget_seconds=numbers["TELEGRAM_SEND_BUDGET_MS"] / 1000,
        audit_retention_days=numbers["AUDIT_RETENTION_DAYS"],
        welcome_text=parse_welcome_text(raw_setting("WELCOME_TEXT")),
        turnstile_site_key=raw_setting("TURNSTILE_SITE_KEY"),
        turnstile_secret_key=raw_setting("TURNSTILE_SECRET_KEY"),
        public_base_url=parse_public_base_url(raw_setting("PUBLIC_BASE_URL")),
        telegram_api_base=api_base,
        turnstile_verify_url=raw_setting("TURNSTILE_VERIFY_URL") or DEFAULT_TURNSTILE_VERIFY_URL,
        turnstile_script_url=raw_setting("TURNSTILE_SCRIPT_URL") or DEFAULT_TURNSTILE_SCRIPT_URL,
        telegram_webapp_script_url=(
            raw_setting("TELEGRAM_WEBAPP_SCRIPT_URL") or DEFAULT_TELEGRAM_WEBAPP_SCRIPT_URL
        ),
    )
