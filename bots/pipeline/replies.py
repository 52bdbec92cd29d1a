"""The bot's answers in the support group (command replies, notices)."""

from __future__ import annotations

from bots.pipeline.classify import GENERAL_THREAD_ID
from bots.pipeline.context import BotContext
from bots.pipeline.failures import required


def reply_in_thread(ctx: BotContext, *, thread_id: int, text: str) -> dict | None:
    """Answer in the support group's ``thread_id``; General is addressed without a thread id
    (Telegram rejects message_thread_id=1 with "message thread not found").

    Returns the sent message, or None after a permanent failure (logged). Retryable ⇒ raise: the
    redelivery repeats the step (command setters are idempotent, so only the reply is re-sent).
    """
    return required(
        "group reply",
        lambda: ctx.client.send_message(
            chat_id=ctx.support_chat_id,
            text=text,
            message_thread_id=None if thread_id == GENERAL_THREAD_ID else thread_id,
        ),
    )
