"""Reply mapping both ways (issue #24): a reply to a relayed message becomes a reply to its
counterpart on the other side, found through the ledger (``group_msg_id`` ↔
``private_msg_id``, in either direction: a reply may answer the other side's message or the
replier's own earlier one). A target the ledger does not know maps to nothing (a plain
message); a target that is gone by the time of the send falls back to a plain message too
(``allow_sending_without_reply``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bots.models import RelayedMessage
from bots.pipeline.classify import is_positive_integer


def _replied_id(message: Mapping[str, Any]) -> int | None:
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping):
        return None
    message_id = replied.get("message_id")
    return message_id if is_positive_integer(message_id) else None


def reply_target_in_topic(*, bot_id: int, user_id: int, message: Mapping[str, Any]) -> int | None:
    """The topic's copy of what the user's private ``message`` replies to, or None."""
    replied = _replied_id(message)
    if replied is None:
        return None
    row = (
        RelayedMessage.objects.filter(bot_id=bot_id, user_id=user_id, private_msg_id=replied)
        .exclude(group_msg_id=None)
        .order_by("-id")
        .first()
    )
    return row.group_msg_id if row is not None else None


def reply_target_in_private_chat(
    *, bot_id: int, user_id: int, thread_id: int, message: Mapping[str, Any]
) -> int | None:
    """The user's copy of what the admin's topic ``message`` replies to, or None. Telegram
    marks every message in a topic as a reply to the topic's first (service) message: that
    one is no reply."""
    replied = _replied_id(message)
    if replied is None or replied == thread_id:
        return None
    row = (
        RelayedMessage.objects.filter(
            bot_id=bot_id, user_id=user_id, thread_id=thread_id, group_msg_id=replied
        )
        .exclude(private_msg_id=None)
        .order_by("-id")
        .first()
    )
    return row.private_msg_id if row is not None else None
