"""``/broadcast`` in General (spec §7.4): the preview and its control message.

Order: admins only ("admins only" in General, no getMe) → parse (usage) → getMe for the
signature (retryable ⇒ raise; permanent ⇒ "cannot fetch the bot's name"; success refreshes the
``bots`` row) → compose (too long) → lazy cleanup → this update's own row: still ``preparing``
⇒ carry it on (a redelivery after a crash), anything else ⇒ done already → another draft ⇒
"already awaiting confirmation" → count the eligible users: none, or more than
BROADCAST_MAX_RECIPIENTS ⇒ not created → insert ``preparing`` (the HTML frozen, confirmable for
5 minutes) → send the preview to General (exactly what users will get) → send the control
message as a reply to it, with *Confirm* / *Cancel* → ``pending`` (the buttons work from now).
Nothing is sent to a user here: that starts with the initiator's *Confirm*.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bots import texts
from bots.clients.telegram import TelegramPermanentError
from bots.models import Broadcast, BroadcastStatus
from bots.pipeline.broadcast.compose import compose, parse_broadcast, signature_from
from bots.pipeline.broadcast.display import control_keyboard, lazy_cleanup
from bots.pipeline.classify import GENERAL_THREAD_ID, is_positive_integer
from bots.pipeline.confirmations import NO_KEYBOARD
from bots.pipeline.context import UpdateContext
from bots.pipeline.failures import best_effort, required
from bots.pipeline.replies import reply_in_thread
from bots.selectors import (
    broadcast_draft_exists,
    broadcast_eligible_user_ids,
    broadcast_get_for_update_id,
)
from bots.services.bots import bot_upsert
from bots.services.broadcasts import (
    broadcast_attach_preview,
    broadcast_create,
    broadcast_delete,
    broadcast_publish,
)

logger = logging.getLogger(__name__)


def _reply(ctx: UpdateContext, text: str) -> None:
    reply_in_thread(ctx, thread_id=GENERAL_THREAD_ID, text=text)


def handle_broadcast_command(ctx: UpdateContext, message: Mapping[str, Any]) -> None:
    """A ``/broadcast`` message in General (classified ``broadcast``)."""
    sender = message.get("from")
    text = message.get("text")
    if not isinstance(sender, Mapping) or not is_positive_integer(sender.get("id")):
        return
    if not ctx.config.is_admin(sender["id"]):
        _reply(ctx, texts.admins_only())
        return
    # Classified broadcast: a text message (classify_update).
    draft = parse_broadcast(text) if isinstance(text, str) else None
    if draft is None:
        _reply(ctx, texts.broadcast_usage())
        return
    try:
        me = ctx.client.get_me()
    except TelegramPermanentError as error:
        logger.warning("broadcast: getMe refused: %s", error)
        _reply(ctx, texts.broadcast_bot_name_failed())
        return
    if isinstance(me, Mapping) and is_positive_integer(me.get("id")):
        bot_upsert(
            bot_id=me["id"],
            username=me.get("username") or "",
            display_name=me.get("first_name") or "",
            now=ctx.now,
        )
    first_name = me.get("first_name") if isinstance(me, Mapping) else None
    announcement = compose(draft, signature=signature_from(first_name))
    if announcement.too_long:
        _reply(ctx, texts.broadcast_too_long(announcement.visible_length))
        return
    lazy_cleanup(ctx)
    row = broadcast_get_for_update_id(bot_id=ctx.bot_id, source_update_id=ctx.update_id)
    if row is not None:
        if row.status == BroadcastStatus.PREPARING:
            _prepare(ctx, row)
        return  # this update's broadcast went on without it
    if broadcast_draft_exists(bot_id=ctx.bot_id):
        _reply(ctx, texts.broadcast_draft_exists())
        return
    limit = ctx.config.broadcast_max_recipients
    eligible = len(broadcast_eligible_user_ids(bot_id=ctx.bot_id, limit=limit + 1))
    if eligible == 0:
        _reply(ctx, texts.broadcast_no_recipients())
        return
    if eligible > limit:
        _reply(ctx, texts.broadcast_too_many(limit))
        return
    row = broadcast_create(
        bot_id=ctx.bot_id,
        source_update_id=ctx.update_id,
        initiator_user_id=sender["id"],
        support_chat_id=ctx.support_chat_id,
        message_html=announcement.html,
        now=ctx.now,
    )
    if row is None:
        # Another /broadcast created its draft between our check and our insert.
        _reply(ctx, texts.broadcast_draft_exists())
        return
    _prepare(ctx, row, eligible=eligible)


def _prepare(ctx: UpdateContext, row: Broadcast, *, eligible: int | None = None) -> None:
    """Send what is missing of a preparing row: the preview, then the control message."""
    if eligible is None:
        limit = ctx.config.broadcast_max_recipients
        eligible = len(broadcast_eligible_user_ids(bot_id=ctx.bot_id, limit=limit + 1))
    if row.preview_msg_id is None:
        preview = required(
            "broadcast preview",
            lambda: ctx.client.send_message(
                chat_id=ctx.support_chat_id, text=row.message_html, parse_mode="HTML"
            ),
        )
        if preview is None:
            broadcast_delete(bot_id=ctx.bot_id, broadcast_id=row.id)
            _reply(ctx, texts.broadcast_preview_failed())
            return
        try:
            stored = broadcast_attach_preview(
                bot_id=ctx.bot_id,
                broadcast_id=row.id,
                preview_msg_id=preview["message_id"],
                now=ctx.now,
            )
        except Exception:
            _reply(ctx, texts.broadcast_preview_failed())
            raise
        if not stored:
            return  # a wipe cancelled the draft meanwhile
        row.preview_msg_id = preview["message_id"]
    control = required(
        "broadcast control message",
        lambda: ctx.client.send_message(
            chat_id=ctx.support_chat_id,
            text=texts.broadcast_control(eligible),
            reply_markup=control_keyboard(row.id),
            reply_to_message_id=row.preview_msg_id,
        ),
    )
    if control is None:
        broadcast_delete(bot_id=ctx.bot_id, broadcast_id=row.id)
        _reply(ctx, texts.broadcast_control_failed())
        return
    published = False
    try:
        published = broadcast_publish(
            bot_id=ctx.bot_id,
            broadcast_id=row.id,
            control_msg_id=control["message_id"],
            now=ctx.now,
        )
    finally:
        if not published:
            # Buttons that would lead nowhere must not stay clickable.
            best_effort(
                "broadcast control message",
                lambda: ctx.client.edit_message_text(
                    chat_id=ctx.support_chat_id,
                    message_id=control["message_id"],
                    text=texts.broadcast_control_invalid(),
                    reply_markup=NO_KEYBOARD,
                ),
            )
