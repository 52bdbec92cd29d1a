"""Shortcuts of the Turnstile tests: the challenge as the user sees it, signed initData, submits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

from tests.bots.conftest import PUBLIC_BASE_URL
from tests.fakes.telegram import FakeMessage, FakeTelegram, FakeUser
from tests.fakes.telegram_webapp import sign_init_data

SUBMIT_PATH = "/telegram/api/verify/turnstile"
# The page's hostname: PUBLIC_BASE_URL's (what Siteverify must report for the token).
HOSTNAME = "support.example.com"


@dataclass(frozen=True)
class Link:
    """The Mini App button of a Turnstile challenge message."""

    message: FakeMessage
    url: str
    request_id: str


def challenge_link(message: FakeMessage) -> Link:
    [[button]] = message.reply_markup["inline_keyboard"]
    url = button["web_app"]["url"]
    [request_id] = parse_qs(urlsplit(url).query)["r"]
    return Link(message=message, url=url, request_id=request_id)


def latest_link(telegram: FakeTelegram, user: FakeUser) -> Link:
    """The button of the bot's latest message to ``user``."""
    return challenge_link(telegram.bot_messages(user.id)[-1])


def init_data_for(telegram: FakeTelegram, user: FakeUser, at: datetime, **extra: str) -> str:
    """initData Telegram would hand the page for ``user`` at ``at`` (signed with the token)."""
    return sign_init_data(telegram.token, user, auth_date=int(at.timestamp()), extra=extra)


def submit(
    client,
    *,
    request_id: str | None = None,
    init_data: str | None = None,
    token: str | None = None,
    body: bytes | str | dict | None = None,
    origin: str | None = PUBLIC_BASE_URL,
    content_type: str = "application/json",
):
    """POST the submit API as the page does (``body`` replaces the three fields when given)."""
    if body is None:
        body = {"requestId": request_id, "initData": init_data, "turnstileToken": token}
    if isinstance(body, dict):
        body = json.dumps(body)
    headers = {} if origin is None else {"Origin": origin}
    return client.post(SUBMIT_PATH, data=body, content_type=content_type, headers=headers)


def pending_columns(row) -> tuple:
    """The six pending-challenge columns of a ``users`` row (all None: no challenge)."""
    return (
        row.verify_answer,
        row.verify_msg_id,
        row.verify_request_hash,
        row.verify_request_expires_at,
        row.verify_request_generation,
        row.verify_submit_not_before,
    )


def error_body(code: str, message: str) -> dict:
    return {"status": "error", "code": code, "message": message}
