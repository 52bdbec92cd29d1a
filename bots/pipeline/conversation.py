"""Which conversation an update belongs to (issue 36): the user whose private chat it comes
from, or whose topic it was written in. One conversation's updates are handled strictly in
Telegram's order, both ways: the user's messages, edits and button presses, and the admins'
replies, edits and commands in the user's topic, and its close/reopen events.

Updates of no conversation — General's commands and broadcasts, the group's buttons (a
/deluser or /wipealldata decision, a broadcast's confirm), a topic without a binding — are
handled each on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bots.pipeline.albums import album_id
from bots.pipeline.classify import (
    GENERAL_THREAD_ID,
    Classification,
    UpdateKind,
    is_positive_integer,
)
from bots.pipeline.content import extract_content
from bots.selectors import topic_get_for_thread

NO_CONVERSATION = None


@dataclass(frozen=True)
class Conversation:
    user_id: int | None  # None: the update belongs to no conversation
    media_group_id: str | None = None  # the album the update's message is an item of


_SENDER_KINDS = {
    UpdateKind.INBOUND: "message",
    UpdateKind.EDIT_INBOUND: "edited_message",
    UpdateKind.CALLBACK: "callback_query",
}
_TOPIC_KINDS = {
    UpdateKind.OUTBOUND: "message",
    UpdateKind.EDIT_OUTBOUND: "edited_message",
    UpdateKind.TOPIC_EVENT: "message",
}


def conversation_of(
    update: Mapping[str, Any], classification: Classification, *, bot_id: int
) -> Conversation:
    """The update's conversation (a topic's owner is read from its binding)."""
    kind = classification.kind
    if kind in _SENDER_KINDS:
        body = update[_SENDER_KINDS[kind]]
        sender = body.get("from")
        user_id = sender.get("id") if isinstance(sender, Mapping) else None
        if not is_positive_integer(user_id):
            return Conversation(NO_CONVERSATION)
        return Conversation(user_id, _album(body) if kind == UpdateKind.INBOUND else None)
    if kind in _TOPIC_KINDS and classification.thread_id not in (None, GENERAL_THREAD_ID):
        topic = topic_get_for_thread(bot_id=bot_id, thread_id=classification.thread_id)
        if topic is None:
            return Conversation(NO_CONVERSATION)
        body = update[_TOPIC_KINDS[kind]]
        return Conversation(topic.user_id, _album(body) if kind == UpdateKind.OUTBOUND else None)
    return Conversation(NO_CONVERSATION)


def _album(message: Mapping[str, Any]) -> str | None:
    content = extract_content(message)
    return album_id(message, content) if content is not None else None
