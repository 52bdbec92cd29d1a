"""Relaying a user's message into their topic, with recovery and its record (spec §2.9, §2.10)."""

from __future__ import annotations

import logging
from typing import Any

from bots import texts
from bots.clients.telegram import (
    TelegramPermanentError,
    is_topic_closed,
    is_topic_gone,
)
from bots.models import BotUser, Direction, Topic
from bots.pipeline.card import display_name, post_card
from bots.pipeline.content import Content, send_content
from bots.pipeline.context import BotContext, UpdateContext
from bots.pipeline.failures import best_effort, recorded
from bots.pipeline.topics import reopen_topic, replace_topic
from bots.selectors import relayed_message_exists
from bots.services.relayed_messages import relayed_message_record
from bots.services.topics import topic_delete
from bots.services.users import user_claim_risk_reminder, user_mark_active

logger = logging.getLogger(__name__)


def relay_inbound(
    ctx: BotContext,
    *,
    user: BotUser,
    topic: Topic,
    content: Content,
    private_msg_id: int | None,
    verification_enabled: bool,
    reply_to_group_msg_id: int | None = None,
) -> None:
    """Send the user's message into the topic; on success write the ledger and, for a user
    marked high-risk, the (best-effort) 24 h reminder. ``reply_to_group_msg_id``: the topic
    message it answers (a mapped reply; dropped when the topic had to be reopened or replaced).

    TOPIC_CLOSED ⇒ reopen and resend once. Topic gone (deleted by hand) ⇒ replace the topic,
    post a fresh card, resend once. Other permanent errors ⇒ drop (binding kept, no ledger).
    Retryable errors and ledger failures propagate: the update is tried again later. A message
    the ledger already records (a later attempt after a failure that followed the relay) is not sent
    again; the ledger row is written again once on a fresh connection when the first try meets
    a dead one, so only a process killed during the send or before that row relays twice.
    """
    # Only a take-over of an earlier attempt of an update can find its message relayed: the
    # first delivery spends no statement on the check (an album's items relayed one by one by
    # the worker lose their album row as each is relayed, so they are never sent twice).
    if (
        isinstance(ctx, UpdateContext)
        and ctx.is_redelivery
        and private_msg_id is not None
        and relayed_message_exists(
            bot_id=ctx.bot_id, user_id=user.user_id, private_msg_id=private_msg_id
        )
    ):
        logger.info("update %s: message %s was relayed already", ctx.update_id, private_msg_id)
        return
    delivered = _send_with_recovery(
        ctx,
        user=user,
        topic=topic,
        content=content,
        verification_enabled=verification_enabled,
        reply_to=reply_to_group_msg_id,
    )
    if delivered is None:
        return
    topic, sent = delivered
    recorded(
        "relay ledger row",
        lambda: relayed_message_record(
            bot_id=ctx.bot_id,
            user_id=user.user_id,
            thread_id=topic.thread_id,
            direction=Direction.IN,
            group_msg_id=sent["message_id"],
            private_msg_id=private_msg_id,
            content_type=content.kind,
            now=ctx.now,
        ),
    )
    if user.is_risk:
        best_effort("risk reminder", lambda: remind_risk(ctx, user=user, thread_id=topic.thread_id))


def _send(
    ctx: BotContext, topic: Topic, content: Content, reply_to: int | None = None
) -> dict[str, Any]:
    return send_content(
        ctx.client,
        content,
        chat_id=ctx.support_chat_id,
        message_thread_id=topic.thread_id,
        reply_to_message_id=reply_to,
    )


def _send_with_recovery(
    ctx: BotContext,
    *,
    user: BotUser,
    topic: Topic,
    content: Content,
    verification_enabled: bool,
    reply_to: int | None,
) -> tuple[Topic, dict[str, Any]] | None:
    try:
        return topic, _send(ctx, topic, content, reply_to)
    except TelegramPermanentError as error:
        if is_topic_closed(error):
            # The row said open but the topic was closed in Telegram without us being told.
            recovered = reopen_topic(ctx, user, topic)
        elif is_topic_gone(error):
            recovered = replace_topic(ctx, user, topic)
        else:
            logger.warning("relay to topic %s failed, message dropped: %s", topic.thread_id, error)
            return None
    if recovered is None:
        return None
    # resolve_topic marked the user active already; this covers an /archive that closed the
    # topic between that and the send (then the reopened topic would belong to an archived user).
    user_mark_active(bot_id=ctx.bot_id, user_id=user.user_id)
    if recovered.pinned_msg_id is None:  # a replacement topic: its card comes first (§2.11)
        post_card(ctx, user=user, topic=recovered, verification_enabled=verification_enabled)
    return _resend(ctx, user=user, topic=recovered, content=content)


def _resend(
    ctx: BotContext, *, user: BotUser, topic: Topic, content: Content
) -> tuple[Topic, dict[str, Any]] | None:
    """The one resend after a recovery; a topic gone again is unbound and the message dropped
    (no loop)."""
    try:
        return topic, _send(ctx, topic, content)
    except TelegramPermanentError as error:
        if is_topic_gone(error):
            topic_delete(bot_id=ctx.bot_id, user_id=user.user_id, thread_id=topic.thread_id)
        logger.warning("relay resend to topic %s failed, dropped: %s", topic.thread_id, error)
        return None


def remind_risk(ctx: BotContext, *, user: BotUser, thread_id: int) -> None:
    """The high-risk reminder in the user's topic, when its 24 h slot is won (spec §2.10; the
    caller makes it best effort)."""
    if user_claim_risk_reminder(bot_id=ctx.bot_id, user_id=user.user_id, now=ctx.now):
        ctx.client.send_message(
            chat_id=ctx.support_chat_id,
            text=texts.risk_reminder(display_name(user)),
            message_thread_id=thread_id,
        )
