"""Admins writing in a topic (spec §3) and native topic close/reopen events (spec §4.12)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bots import texts
from bots.clients.telegram import (
    TelegramPermanentError,
    is_recipient_unreachable,
    is_topic_not_modified,
)
from bots.models import Direction, Topic, TopicStatus, UserStatus
from bots.pipeline.albums import album_id, collect_album_item
from bots.pipeline.classify import is_positive_integer
from bots.pipeline.commands import handle_admin_command
from bots.pipeline.content import extract_content, send_content
from bots.pipeline.context import UpdateContext
from bots.pipeline.failures import best_effort, recorded
from bots.pipeline.replies import reply_in_thread, report_in_general
from bots.pipeline.replies_mapping import reply_target_in_private_chat
from bots.selectors import relayed_reply_exists, topic_get_for_thread, user_get
from bots.services.relay_notes import relay_refusal_clear, relay_refusal_first
from bots.services.relayed_messages import relayed_message_record
from bots.services.topics import topic_mark_closed, topic_mark_open

logger = logging.getLogger(__name__)


def handle_outbound(ctx: UpdateContext, message: Mapping[str, Any], *, thread_id: int) -> None:
    """A message in the support group's ``thread_id``: relay an admin's message to the user.

    Non-admins: a ``/command`` gets the "admins only" reply, anything else is ignored (members,
    other bots). Admin commands go to the command pipeline, never to a user. A topic without a
    binding gets the "no binding" notice. A natively closed topic is reopened and the reply
    relayed; an archived user's is not relayed, and the admin is told so in General (a closed
    topic refuses the bot's messages). Relay failures: retryable ⇒ raise; permanent (e.g. the
    user blocked the bot) ⇒ no ledger row, and a short note in the topic (once while the user
    stays unreachable). A reply the ledger records as relayed is never sent again (a take-over
    of an attempt that relayed it but did not finish).
    """
    content = extract_content(message)
    if content is None:
        return
    sender = message.get("from")
    if not isinstance(sender, Mapping) or not is_positive_integer(sender.get("id")):
        return
    # Only text can be a command; a caption starting with "/" is relayed like any caption.
    text = content.text if content.is_text else None
    command = text if text is not None and text.startswith("/") else None
    if not ctx.config.is_admin(sender["id"]):
        if command is not None:
            reply_in_thread(ctx, thread_id=thread_id, text=texts.admins_only())
        return
    if command is not None:
        handle_admin_command(ctx, command, thread_id=thread_id, admin=sender)
        return
    topic = topic_get_for_thread(bot_id=ctx.bot_id, thread_id=thread_id)
    if topic is None:
        reply_in_thread(ctx, thread_id=thread_id, text=texts.no_binding())
        return
    if topic.status != TopicStatus.OPEN and not _reopen_for_reply(ctx, topic):
        return
    album = album_id(message, content)
    group_msg_id = message.get("message_id")
    if album is not None and is_positive_integer(group_msg_id):
        collect_album_item(
            ctx,
            direction=Direction.OUT,
            media_group_id=album,
            user_id=topic.user_id,
            thread_id=thread_id,
            source_msg_id=group_msg_id,
            content=content,
        )
        return
    known_id = group_msg_id if is_positive_integer(group_msg_id) else None
    if (
        ctx.is_redelivery
        and known_id is not None
        and relayed_reply_exists(bot_id=ctx.bot_id, user_id=topic.user_id, group_msg_id=known_id)
    ):
        logger.info("update %s: reply %s was relayed already", ctx.update_id, known_id)
        return
    reply_to = reply_target_in_private_chat(
        bot_id=ctx.bot_id, user_id=topic.user_id, thread_id=thread_id, message=message
    )
    try:
        sent = send_content(
            ctx.client, content, chat_id=topic.user_id, reply_to_message_id=reply_to
        )
    except TelegramPermanentError as error:
        logger.warning("outbound relay to user %s failed, dropped: %s", topic.user_id, error)
        _note_undelivered(ctx, topic, error)
        return
    recorded(
        "reply ledger row",
        lambda: relayed_message_record(
            bot_id=ctx.bot_id,
            user_id=topic.user_id,
            thread_id=thread_id,
            direction=Direction.OUT,
            group_msg_id=known_id,
            private_msg_id=sent["message_id"],
            content_type=content.kind,
            now=ctx.now,
        ),
    )
    relay_refusal_clear(bot_id=ctx.bot_id, user_id=topic.user_id)


def _reopen_for_reply(ctx: UpdateContext, topic: Topic) -> bool:
    """An admin writes in a closed topic: reopen it for the reply (the user's next message
    would). An archived user's conversation stays closed — the reply is not relayed, and the
    admin is told so in General, where they see it. True when the reply may go."""
    user = user_get(bot_id=ctx.bot_id, user_id=topic.user_id)
    if user is None or user.status != UserStatus.ACTIVE:
        report_in_general(ctx, texts.reply_not_relayed_archived(topic.user_id, topic.thread_id))
        return False
    try:
        ctx.client.reopen_forum_topic(
            chat_id=ctx.support_chat_id, message_thread_id=topic.thread_id
        )
    except TelegramPermanentError as error:
        if not is_topic_not_modified(error):  # TOPIC_NOT_MODIFIED: open already
            logger.warning("reopen of topic %s for a reply failed: %s", topic.thread_id, error)
            report_in_general(ctx, texts.reply_not_relayed_closed(topic.user_id, topic.thread_id))
            return False
    topic_mark_open(bot_id=ctx.bot_id, thread_id=topic.thread_id)
    return True


def _note_undelivered(ctx: UpdateContext, topic: Topic, error: TelegramPermanentError) -> None:
    """Tell the admins in the topic that the reply did not reach the user: once while the
    user stays unreachable (blocked, deactivated), every time for any other refusal (a file
    Telegram rejects, say). Best effort."""
    if is_recipient_unreachable(error):
        if not relay_refusal_first(bot_id=ctx.bot_id, user_id=topic.user_id):
            return
        text = texts.reply_refused_by_user(error.description)
    else:
        text = texts.reply_not_delivered(error.description)
    best_effort(
        "undelivered note", lambda: reply_in_thread(ctx, thread_id=topic.thread_id, text=text)
    )


def handle_topic_event(ctx: UpdateContext, message: Mapping[str, Any], *, thread_id: int) -> None:
    """Mirror a native close/reopen of a topic on its binding (users, notes, ledger untouched)."""
    if isinstance(message.get("forum_topic_closed"), Mapping):
        changed = topic_mark_closed(bot_id=ctx.bot_id, thread_id=thread_id, now=ctx.now)
    else:
        changed = topic_mark_open(bot_id=ctx.bot_id, thread_id=thread_id)
    if not changed:
        logger.info("topic event for thread %s without a binding", thread_id)
