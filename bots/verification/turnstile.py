"""The Turnstile mode's challenge (spec §5.1, §5.3): a Mini App button opening the web page.

A Turnstile request is identified by 32 random bytes (``r``, 64 lowercase hex characters, in the
page's URL); only their SHA-256 is stored (``verify_request_hash``), with an expiry 600 s after
issue that is never extended. The mode is never downgraded: without both Turnstile keys or a
usable https origin for the page, no challenge is issued and the user is told verification is
unavailable (selfcheck names the cause).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode, urlsplit

from django.urls import reverse

from bots import texts
from bots.conf import BotConfig

REQUEST_LIFETIME = timedelta(seconds=600)
# The widget's action and Siteverify's expected one: a token from another site's or another
# page's widget does not verify anybody here.
ACTION = "hodor_verify"
REQUEST_ID = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class TurnstileChallenge:
    request_id: str  # the nonce, hex: only in the button's URL, never stored
    request_hash: str
    expires_at: datetime
    text: str
    reply_markup: dict


def request_hash_of(request_id: str) -> str:
    """The stored identity of a request id (64 hex characters): SHA-256 of its 32 bytes."""
    return hashlib.sha256(bytes.fromhex(request_id)).hexdigest()


def page_origin(config: BotConfig, request_origin: str | None) -> str | None:
    """The origin the verification page is served at: PUBLIC_BASE_URL when valid, else the
    origin the current request reached us at."""
    return config.public_base_url or request_origin


def button_origin(config: BotConfig, request_origin: str | None) -> str | None:
    """The origin of the Mini App button's URL, or None when there is none Telegram accepts:
    Mini Apps open https URLs only."""
    origin = page_origin(config, request_origin)
    if origin is None or urlsplit(origin).scheme != "https":
        return None
    return origin


def missing_keys(config: BotConfig) -> list[str]:
    """The Turnstile variables the mode needs and the configuration lacks."""
    return [
        name
        for name, value in (
            ("TURNSTILE_SITE_KEY", config.turnstile_site_key),
            ("TURNSTILE_SECRET_KEY", config.turnstile_secret_key),
        )
        if not value
    ]


def verify_page_url(origin: str, request_id: str) -> str:
    return f"{origin}{reverse('bots:verify_page')}?{urlencode({'r': request_id})}"


def build_turnstile_challenge(*, origin: str, now: datetime) -> TurnstileChallenge:
    """A fresh request: its id, stored hash, expiry and the message with the Mini App button."""
    request_id = secrets.token_bytes(32).hex()
    button = {
        "text": texts.challenge_turnstile_button(),
        "web_app": {"url": verify_page_url(origin, request_id)},
    }
    return TurnstileChallenge(
        request_id=request_id,
        request_hash=request_hash_of(request_id),
        expires_at=now + REQUEST_LIFETIME,
        text=texts.challenge_turnstile(),
        reply_markup={"inline_keyboard": [[button]]},
    )
