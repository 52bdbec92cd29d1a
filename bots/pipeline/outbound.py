"""Admins writing in a topic (spec §3) and native topic close/reopen events (spec §4.12)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from bots import copy
from bots.models import Direction, TopicStatus
from bots.pipeline.albums import album_id, collect_album_item
from bots.pipeline.classify import is_positive_integer
from bots.pipeline.commands import handle_admin_command
from bots.pipeline.content import extract_content, send_content
from bots.pipeline.context import UpdateContext
from bots.pipeline.failures import required
from bots.pipeline.replies import reply_in_thread
from bots.pipeline.replies_mapping import reply_target_in_private_chat
from bots.selectors import topic_get_for_thread
from bots.services.relayed_messages import relayed_message_record
from bots.services.topics import topic_mark_closed, topic_mark_open

logger = logging.getLogger(__name__)


def handle_outbound(ctx: UpdateContext, message: Mapping, *, thread_id: int) -> None:
    """A message in the support group's ``thread_id``: relay an admin's message to the user.

    Non-admins: a ``/command`` gets the "admins only" reply, anything else is ignored (members,
    other bots). Admin commands go to the command pipeline, never to a user. A topic without an
    open binding gets the "no binding" notice. Relay failures: retryable ⇒ raise; permanent
    (e.g. the user blocked the bot) ⇒ logged and dropped, no ledger row, nothing told to admins.
    """
    content = extract_content(message)
    if content is None:
        return
    sender = message.get("from")
    if not isinstance(sender, Mapping) or not is_positive_integer(sender.get("id")):
        return
    # Only text can be a command; a caption starting with "/" is relayed like any caption.
    is_command = content.is_text and content.text.startswith("/")
    if not ctx.config.is_admin(sender["id"]):
        if is_command:
            reply_in_thread(ctx, thread_id=thread_id, text=copy.admins_only())
        return
    if is_command:
        handle_admin_command(ctx, content.text, thread_id=thread_id, admin=sender)
        return
    topic = topic_get_for_thread(bot_id=ctx.bot_id, thread_id=thread_id)
    if topic is None or topic.status != TopicStatus.OPEN:
        reply_in_thread(ctx, thread_id=thread_id, text=copy.no_binding())
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
    reply_to = reply_target_in_private_chat(
        bot_id=ctx.bot_id, user_id=topic.user_id, thread_id=thread_id, message=message
    )
    sent = required(
        "outbound relay",
        lambda: send_content(
            ctx.client, content, chat_id=topic.user_id, reply_to_message_id=reply_to
        ),
    )
    if sent is None:
        return
    group_msg_id = message.get("message_id")
    relayed_message_record(
        bot_id=ctx.bot_id,
        user_id=topic.user_id,
        thread_id=thread_id,
        direction=Direction.OUT,
        group_msg_id=group_msg_id if is_positive_integer(group_msg_id) else None,
        private_msg_id=sent["message_id"],
        content_type=content.kind,
        now=ctx.now,
    )


def handle_topic_event(ctx: UpdateContext, message: Mapping, *, thread_id: int) -> None:
    """Mirror a native close/reopen of a topic on its binding (users, notes, ledger untouched)."""
    if isinstance(message.get("forum_topic_closed"), Mapping):
        changed = topic_mark_closed(bot_id=ctx.bot_id, thread_id=thread_id, now=ctx.now)
    else:
        changed = topic_mark_open(bot_id=ctx.bot_id, thread_id=thread_id)
    if not changed:
        logger.info("topic event for thread %s without a binding", thread_id)
