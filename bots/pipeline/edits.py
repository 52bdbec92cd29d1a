"""Edit sync both ways (issue #24): an edited message edits its relayed copy.

A user's edit in their private chat edits the copy in their topic; an admin's edit in the
topic edits the user's copy. The copy is found through the ledger (``messages`` maps
``group_msg_id`` ↔ ``private_msg_id``); an edit of a message the ledger does not know (never
relayed, purged, a command) stays silent. Text edits the text (``editMessageText``); a photo,
video, animation, document or audio is replaced with its caption (``editMessageMedia``, which
also carries a caption-only edit); a voice message's caption is edited
(``editMessageCaption``); stickers cannot be edited. A copy whose kind differs (text became
media) or that is gone, and "message is not modified" (a redelivered edit), are dropped
silently; a retryable failure raises (Telegram redelivers the edit).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bots.models import Direction
from bots.pipeline.classify import is_positive_integer
from bots.pipeline.content import Content, extract_content
from bots.pipeline.context import UpdateContext
from bots.pipeline.failures import required
from bots.selectors import relayed_message_by_group, relayed_message_by_private, user_get

logger = logging.getLogger(__name__)

# Media Telegram lets editMessageMedia replace (https://core.telegram.org/bots/api#inputmedia).
REPLACEABLE_MEDIA = frozenset({"photo", "video", "animation", "document", "audio"})


def handle_inbound_edit(ctx: UpdateContext, message: Mapping[str, Any]) -> None:
    """A user edited a private message: edit its copy in the topic."""
    content = extract_content(message)
    user_id = message["from"]["id"]
    if content is None or not is_positive_integer(user_id):
        return
    user = user_get(bot_id=ctx.bot_id, user_id=user_id)
    if user is None or user.is_banned:
        return
    row = relayed_message_by_private(
        bot_id=ctx.bot_id,
        user_id=user_id,
        private_msg_id=message["message_id"],
        direction=Direction.IN,
    )
    if row is None or row.group_msg_id is None:
        return
    edit_copy(
        ctx,
        content,
        chat_id=ctx.support_chat_id,
        message_id=row.group_msg_id,
        copy_kind=row.content_type,
    )


def handle_outbound_edit(ctx: UpdateContext, message: Mapping[str, Any], *, thread_id: int) -> None:
    """An admin edited a message in a topic: edit the user's copy."""
    content = extract_content(message)
    if content is None or not ctx.config.is_admin(message["from"]["id"]):
        return
    row = relayed_message_by_group(
        bot_id=ctx.bot_id,
        thread_id=thread_id,
        group_msg_id=message["message_id"],
        direction=Direction.OUT,
    )
    if row is None or row.private_msg_id is None:
        return
    edit_copy(
        ctx, content, chat_id=row.user_id, message_id=row.private_msg_id, copy_kind=row.content_type
    )


def edit_copy(
    ctx: UpdateContext, content: Content, *, chat_id: int, message_id: int, copy_kind: str
) -> None:
    """Make the bot's copy ``message_id`` in ``chat_id`` show ``content`` (see the module
    docstring for what can be edited)."""
    client = ctx.client
    if content.is_text and copy_kind == "text":
        text = content.text
        assert text is not None  # extract_content gives every text content its text

        def edit() -> dict[str, Any]:
            return client.edit_message_text(chat_id=chat_id, message_id=message_id, text=text)

    elif content.kind in REPLACEABLE_MEDIA and copy_kind in REPLACEABLE_MEDIA:
        file_id = content.file_id
        assert file_id is not None  # and every media content its file

        def edit() -> dict[str, Any]:
            return client.edit_message_media(
                chat_id=chat_id,
                message_id=message_id,
                kind=content.kind,
                file_id=file_id,
                caption=content.caption,
            )

    elif content.kind == "voice" and copy_kind == "voice":

        def edit() -> dict[str, Any]:
            return client.edit_message_caption(
                chat_id=chat_id, message_id=message_id, caption=content.caption or ""
            )

    else:
        return  # a sticker, or a copy of another kind: Telegram cannot turn one into the other
    required("edit sync", edit)
