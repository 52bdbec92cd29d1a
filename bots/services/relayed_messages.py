"""Writes to ``messages``: the relayed messages (one row per message copied between a user and
the group)."""

from __future__ import annotations

from datetime import datetime

from bots.models import Direction, RelayedMessage


def relayed_message_record(
    *,
    bot_id: int,
    user_id: int,
    thread_id: int,
    direction: Direction,
    group_msg_id: int | None,
    private_msg_id: int | None,
    content_type: str,
    now: datetime,
) -> RelayedMessage:
    """Record one relayed message. Database errors propagate (the update is retried)."""
    return RelayedMessage.objects.create(
        bot_id=bot_id,
        user_id=user_id,
        thread_id=thread_id,
        direction=direction,
        group_msg_id=group_msg_id,
        private_msg_id=private_msg_id,
        content_type=content_type,
        created_at=now,
    )


def relayed_messages_delete_for_thread(*, bot_id: int, thread_id: int, up_to_id: int) -> int:
    """/purgemsg's end: forget the thread's ledger rows up to ``up_to_id`` (the last row when
    the purge started; rows of messages relayed during the purge stay tracked). Returns how many
    rows were deleted."""
    deleted, _ = RelayedMessage.objects.filter(
        bot_id=bot_id, thread_id=thread_id, id__lte=up_to_id
    ).delete()
    return deleted
