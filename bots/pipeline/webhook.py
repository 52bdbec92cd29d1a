"""``POST /telegram/webhook``: authentication, the durable inbox, the first attempt (§6, issue 36).

Every update is stored before it is answered: its ``processed_updates`` claim and its
``update_inbox`` row are written in one transaction. From then on the row, not Telegram's
redelivery, brings the update to its end. The webhook works on it at once — unless its
conversation has updates waiting (they go first) — for at most TELEGRAM_SEND_BUDGET_MS of
waiting for send permits; what it cannot finish (no permit in time, a deletion running, a 429,
a transient failure) stays in the inbox for a Celery worker (``bots.pipeline.inbox_work``) and
is answered 200 all the same. Telegram's redelivery is left for what could not be stored.

| situation                                      | status                          |
|------------------------------------------------|---------------------------------|
| secret header missing/wrong, or not configured | 401, zero writes                |
| body not JSON / no numeric update_id           | 200, nothing recorded           |
| no bot row yet (setwebhook never ran), no token| 500, nothing recorded           |
| PostgreSQL cannot store it                     | 500, nothing recorded           |
| duplicate (processed or failed)                | 200                             |
| stored by an earlier delivery, not done yet    | 200 (the inbox finishes it)     |
| stored, finished now                           | 200, status processed           |
| stored, left to the worker                     | 200, status stays processing    |
| poison (MAX_ATTEMPTS failed attempts)          | 200, status failed              |
| a claim of before the inbox, fresh (in flight) | 500                             |
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError

from bots.auth import secret_matches
from bots.conf import load_config
from bots.pipeline.classify import classify_update, is_integer
from bots.pipeline.conversation import conversation_of
from bots.pipeline.inbox_queue import queue_drain
from bots.pipeline.inbox_work import follow_up, work_on
from bots.results import EndpointResult
from bots.selectors import bot_current_id
from bots.services.inbox import (
    StoreState,
    inbox_leased_by_store,
    inbox_store,
    new_lease_token,
)
from bots.storable_text import storable_update

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


OK = EndpointResult(200, {"status": "ok"})
UNAUTHORIZED = EndpointResult(401, {"error": "unauthorized"})
TEMPORARY_FAILURE = EndpointResult(500, {"error": "temporary_failure"})


def parse_update(body: bytes) -> dict[str, Any] | None:
    """The update object with its text made storable (``storable_update``), or None when the
    body is not JSON or has no numeric update_id."""
    try:
        update = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: nested deeper than the parser allows. Acknowledged (200) like any
        # other non-update, so Telegram does not redeliver the poison body.
        return None
    if not isinstance(update, dict):
        return None
    update_id = update.get("update_id")
    if not is_integer(update_id) or update_id < 0:
        return None
    storable: dict[str, Any] = storable_update(update)
    return storable


@dataclass(frozen=True)
class Accepted:
    """The update is stored and this request holds its lease (or it is queued behind others)."""

    bot_id: int
    owned: bool
    attempts: int
    token: str
    conversation_user_id: int | None


def webhook_handle(
    *, body: bytes, secret_header: str | None, now: datetime, origin: str | None = None
) -> EndpointResult:
    """Authenticate, store and (when it may) process one delivery; return Telegram's answer.

    ``origin``: where the delivery arrived (the Turnstile button's origin without
    PUBLIC_BASE_URL)."""
    config = load_config()
    if not secret_matches(secret_header, config.webhook_secret):
        return UNAUTHORIZED
    update = parse_update(body)
    if update is None:
        logger.warning("webhook: body is not an update; acknowledged without processing")
        return OK
    update_id = update["update_id"]
    if not config.bot_token:
        # Without a token every Telegram call would fail and the update be dropped: wait.
        logger.error("webhook: TELEGRAM_BOT_TOKEN is not set; update %s left for later", update_id)
        return TEMPORARY_FAILURE
    try:
        accepted = _store(update, now=now, origin=origin, support_chat_id=config.support_chat_id)
    except DatabaseError:
        logger.exception("webhook: database unavailable; update %s left for later", update_id)
        return TEMPORARY_FAILURE
    if isinstance(accepted, EndpointResult):
        return accepted
    if not accepted.owned:
        queue_drain(bot_id=accepted.bot_id)  # behind its conversation's waiting updates
        return OK
    leased = inbox_leased_by_store(
        bot_id=accepted.bot_id,
        update_id=update_id,
        payload=update,
        conversation_user_id=accepted.conversation_user_id,
        origin=origin,
        attempts=accepted.attempts,
        token=accepted.token,
    )
    outcome = work_on(leased, config=config, budget_seconds=config.send_budget_seconds, now=now)
    follow_up(outcome, bot_id=accepted.bot_id)
    return OK


def _store(
    update: dict[str, Any], *, now: datetime, origin: str | None, support_chat_id: int | None
) -> Accepted | EndpointResult:
    """Claim and store the update, or the answer to give when there is nothing to work on.
    Raises DatabaseError when PostgreSQL cannot store it."""
    update_id = update["update_id"]
    bot_id = bot_current_id()
    if bot_id is None:
        logger.error("webhook: no bots row (run setwebhook); update %s left for later", update_id)
        return TEMPORARY_FAILURE
    conversation = conversation_of(update, classify_update(update, support_chat_id), bot_id=bot_id)
    token = new_lease_token()
    stored = inbox_store(
        bot_id=bot_id,
        update_id=update_id,
        payload=update,
        conversation_user_id=conversation.user_id,
        media_group_id=conversation.media_group_id,
        origin=origin,
        now=now,
        token=token,
    )
    if stored.state in (StoreState.DUPLICATE, StoreState.WAITING):
        return OK
    if stored.state == StoreState.IN_FLIGHT:
        return TEMPORARY_FAILURE
    return Accepted(
        bot_id=bot_id,
        owned=stored.state == StoreState.OWNED,
        attempts=stored.attempts,
        token=token,
        conversation_user_id=conversation.user_id,
    )
