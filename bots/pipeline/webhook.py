"""``POST /telegram/webhook``: authentication, the idempotency claim, the update router (§6).

Telegram's redelivery is the retry mechanism: a retryable failure answers 500 and leaves the
claim ``processing``; the next delivery after 60 s takes it over, and after MAX_ATTEMPTS
attempts the update is declared poison (``failed``, 200). An update is marked processed only
after its pipeline finished.

| situation                                      | status                          |
|------------------------------------------------|---------------------------------|
| secret header missing/wrong, or not configured | 401, zero writes                |
| body not JSON / no numeric update_id           | 200, nothing recorded           |
| no bot row yet (setwebhook never ran), no token| 500, nothing recorded           |
| duplicate (processed or failed)                | 200                             |
| in-flight (fresh processing claim)             | 500                             |
| poison                                         | 200, status failed              |
| ignore / success                               | 200, status processed           |
| retryable failure                              | 500, status stays processing    |
| a call got no send permit within the budget    | 500, claim given up, not counted|

A call that got no send permit from the outbound limiter was not made: the update is not
failing, the bot is pacing itself (a burst into the support group, 20 messages a minute). Its
claim is given up at once (``processed_update_release``): the next delivery takes it over
without waiting out the 60 s, and such attempts do not count toward MAX_ATTEMPTS, so a burst
never turns a user's message into poison.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError

from bots.auth import secret_matches
from bots.clients.telegram import TelegramError
from bots.conf import BotConfig, load_config
from bots.outbound.paced import NoSendPermit
from bots.pipeline.broadcast.creation import handle_broadcast_command
from bots.pipeline.classify import UpdateKind, classify_update, is_integer
from bots.pipeline.context import UpdateContext
from bots.pipeline.edits import handle_inbound_edit, handle_outbound_edit
from bots.pipeline.group_callbacks import handle_group_callback
from bots.pipeline.inbound import handle_inbound
from bots.pipeline.outbound import handle_outbound, handle_topic_event
from bots.results import EndpointResult
from bots.selectors import bot_current_id
from bots.services.deletion_fence import DeletionInProgress
from bots.services.processed_updates import (
    ClaimState,
    GivenBack,
    processed_update_claim,
    processed_update_given_back,
    processed_update_mark_failed,
    processed_update_mark_processed,
    processed_update_release,
)
from bots.storable_text import storable_update
from bots.verification.flow import handle_verification_callback

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


OK = EndpointResult(200, {"status": "ok"})
UNAUTHORIZED = EndpointResult(401, {"error": "unauthorized"})
TEMPORARY_FAILURE = EndpointResult(500, {"error": "temporary_failure"})


def parse_update(body: bytes) -> dict | None:
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
    return storable_update(update)


@dataclass(frozen=True)
class Ownership:
    """This delivery owns the update: process it as attempt ``attempts``."""

    bot_id: int
    attempts: int
    settled_before: frozenset[str] = frozenset()  # steps settled by attempts given back


def webhook_handle(
    *, body: bytes, secret_header: str | None, now: datetime, origin: str | None = None
) -> EndpointResult:
    """Authenticate, claim and process one delivery; return the answer for Telegram.

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
        claimed = _claim(update_id, config=config, now=now)
    except DatabaseError:
        logger.exception("webhook: database unavailable; update %s left for later", update_id)
        return TEMPORARY_FAILURE
    if isinstance(claimed, EndpointResult):
        return claimed
    context = UpdateContext(
        bot_id=claimed.bot_id,
        update_id=update_id,
        config=config,
        client=config.telegram_client(budget_seconds=config.send_budget_seconds),
        attempts=claimed.attempts,
        now=now,
        request_origin=origin,
        settled_before=claimed.settled_before,
    )
    try:
        route_update(context, update)
        if not processed_update_mark_processed(
            bot_id=claimed.bot_id, update_id=update_id, attempts=claimed.attempts
        ):
            logger.warning("update %s was taken over while it ran", update_id)
    except DeletionInProgress as error:
        logger.info("update %s: %s; left for redelivery", update_id, error)
        return TEMPORARY_FAILURE
    except NoSendPermit as error:
        logger.info("update %s: %s; given back for redelivery", update_id, error)
        _release(context)
        return TEMPORARY_FAILURE
    except TelegramError as error:
        # str(error) is sanitized (method, status, description): no token, no URL.
        logger.warning("update %s: %s; left for redelivery", update_id, error)
        return TEMPORARY_FAILURE
    except Exception:  # any other failure (database, a bug) is retried like a retryable one
        logger.exception("update %s failed; left for redelivery", update_id)
        return TEMPORARY_FAILURE
    return OK


def _release(context: UpdateContext) -> None:
    """Give the claim back uncounted (module docstring); a failure to do so leaves the claim
    as a failed attempt's (taken over after 60 s, counted)."""
    try:
        processed_update_release(
            bot_id=context.bot_id,
            update_id=context.update_id,
            attempts=context.attempts,
            now=context.now,
            settled=context.progress.settled | context.settled_before,
        )
    except DatabaseError:
        logger.exception("update %s: could not give the claim back", context.update_id)


def _claim(update_id: int, *, config: BotConfig, now: datetime) -> Ownership | EndpointResult:
    """Claim the update, or the answer to give when this delivery must not process it."""
    bot_id = bot_current_id()
    if bot_id is None:
        logger.error("webhook: no bots row (run setwebhook); update %s left for later", update_id)
        return TEMPORARY_FAILURE
    claim = processed_update_claim(bot_id=bot_id, update_id=update_id, now=now)
    if claim.state == ClaimState.DUPLICATE:
        return OK
    if claim.state == ClaimState.IN_FLIGHT:
        return TEMPORARY_FAILURE
    # A redelivery: what earlier attempts given back for want of a permit left (one Redis call).
    given_back = (
        processed_update_given_back(bot_id=bot_id, update_id=update_id)
        if claim.attempts > 0
        else GivenBack()
    )
    # Attempts that only waited for a send permit are not failures (module docstring).
    if claim.attempts - given_back.attempts >= config.max_attempts:
        processed_update_mark_failed(bot_id=bot_id, update_id=update_id, attempts=claim.attempts)
        logger.error(
            "update %s failed %s times; skipped as poison",
            update_id,
            claim.attempts - given_back.attempts,
        )
        return OK
    return Ownership(bot_id=bot_id, attempts=claim.attempts, settled_before=given_back.settled)


def route_update(context: UpdateContext, update: Mapping) -> None:
    """Run the pipeline the update's classification selects."""
    classification = classify_update(update, context.config.support_chat_id)
    kind = classification.kind
    if kind == UpdateKind.INBOUND:
        handle_inbound(context, update["message"])
    elif kind == UpdateKind.CALLBACK:
        handle_verification_callback(context, update["callback_query"])
    elif kind == UpdateKind.OUTBOUND:
        handle_outbound(context, update["message"], thread_id=classification.thread_id)
    elif kind == UpdateKind.TOPIC_EVENT:
        handle_topic_event(context, update["message"], thread_id=classification.thread_id)
    elif kind == UpdateKind.GROUP_CALLBACK:
        handle_group_callback(context, update["callback_query"])
    elif kind == UpdateKind.BROADCAST:
        handle_broadcast_command(context, update["message"])
    elif kind == UpdateKind.EDIT_INBOUND:
        handle_inbound_edit(context, update["edited_message"])
    elif kind == UpdateKind.EDIT_OUTBOUND:
        handle_outbound_edit(context, update["edited_message"], thread_id=classification.thread_id)
    else:
        logger.debug("update %s: %s, nothing to do", context.update_id, kind)
