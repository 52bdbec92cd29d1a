"""Telegram Mini App ``initData``: who opened the verification page (spec §5.5, Telegram's
"Validating data received via the Mini App" rule).

``initData`` is a query string Telegram signs with the bot token: ``hash`` is the hex
HMAC-SHA256 of the data-check-string (every other ``key=value`` pair, sorted by key, joined by
``\\n``) under the key HMAC-SHA256("WebAppData", bot token) — kept binary, not hex. ``signature``
(Telegram's third-party Ed25519 signature) stays in the data-check-string like any other field.

Parsing is strict and done once: at most 8 KiB and 64 fields; an empty part, a part without
``=``, malformed percent-encoding, invalid UTF-8 or a repeated key rejects the whole string.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote_to_bytes

from bots.conf import parse_safe_integer

MAX_INIT_DATA_BYTES = 8 * 1024
MAX_FIELDS = 64
MAX_AGE = timedelta(seconds=300)
MAX_FUTURE_SKEW = timedelta(seconds=30)

_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class WebAppIdentity:
    """The Telegram user ``initData`` vouches for, and when Telegram signed it."""

    user_id: int
    auth_date: datetime


def _decode(text: str) -> str | None:
    """Form-decode one key or value (``+`` is a space); None when malformed."""
    if _BAD_PERCENT.search(text):
        return None
    try:
        return unquote_to_bytes(text.replace("+", " ")).decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_init_data(raw: str) -> dict[str, str] | None:
    """The decoded fields of ``raw``, or None when it breaks any parsing rule."""
    if len(raw.encode("utf-8")) > MAX_INIT_DATA_BYTES:
        return None
    parts = raw.split("&")
    if len(parts) > MAX_FIELDS:
        return None
    fields: dict[str, str] = {}
    for part in parts:
        if not part or "=" not in part:
            return None
        raw_key, raw_value = part.split("=", 1)
        key, value = _decode(raw_key), _decode(raw_value)
        if not key or value is None or key in fields:
            return None
        fields[key] = value
    return fields


def init_data_hash(fields: dict[str, str], *, bot_token: str) -> str:
    """The hex HMAC Telegram puts in ``hash`` for ``fields`` (``hash`` itself left out)."""
    check_string = "\n".join(
        f"{key}={fields[key]}" for key in sorted(fields) if key != "hash"
    ).encode("utf-8")
    secret = hmac.new(b"WebAppData", bot_token.encode("utf-8"), hashlib.sha256).digest()
    return hmac.new(secret, check_string, hashlib.sha256).hexdigest()


def _user_id(user_json: str) -> int | None:
    try:
        user = json.loads(user_json)
    except ValueError:
        return None
    user_id = user.get("id") if isinstance(user, dict) else None
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        return None
    return user_id if 0 < user_id <= 2**53 - 1 else None


def validate_init_data(raw: str, *, bot_token: str, now: datetime) -> WebAppIdentity | None:
    """The identity ``raw`` proves at ``now``, or None.

    None: unparseable; ``hash``, ``auth_date`` or ``user`` missing; a wrong HMAC (compared in
    constant time); a user without a positive safe-integer id; ``auth_date`` more than 30 s in
    the future or more than 300 s in the past.
    """
    fields = parse_init_data(raw)
    if fields is None or not {"hash", "auth_date", "user"} <= fields.keys():
        return None
    presented = fields["hash"]
    expected = init_data_hash(fields, bot_token=bot_token)
    # compare_digest on equal-length ASCII; a presented value of another shape is simply wrong.
    if not _HEX_DIGEST.fullmatch(presented) or not hmac.compare_digest(presented, expected):
        return None
    user_id = _user_id(fields["user"])
    seconds = parse_safe_integer(fields["auth_date"])
    if user_id is None or seconds is None:
        return None
    try:
        auth_date = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, ValueError, OSError):  # beyond the year 9999
        return None
    if auth_date > now + MAX_FUTURE_SKEW or now - auth_date > MAX_AGE:
        return None
    return WebAppIdentity(user_id=user_id, auth_date=auth_date)
