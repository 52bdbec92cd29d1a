"""The bot's answers in the support group (command replies, notices).

A topic closed in Telegram refuses the bot's messages (``TOPIC_CLOSED``): an answer meant for
such a topic is posted in General instead, saying which topic it is about, so that no answer
to an admin silently goes nowhere (issue 36).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bots import texts
from bots.clients.telegram import TelegramPermanentError, is_topic_closed
from bots.pipeline.classify import GENERAL_THREAD_ID
from bots.pipeline.context import BotContext
from bots.pipeline.failures import required

logger = logging.getLogger(__name__)


def send_in_thread(
    ctx: BotContext, *, thread_id: int, text: str, send: Callable[[str, int | None], dict[str, Any]]
) -> dict[str, Any] | None:
    """``send(text, message_thread_id)`` into ``thread_id`` (General without a thread id:
    Telegram rejects message_thread_id=1 with "message thread not found"); into General, with
    a line naming the topic, when the topic is closed.

    Returns the sent message, or None after a permanent failure (logged). Retryable ⇒ raise:
    the update's next attempt repeats the step."""
    if thread_id == GENERAL_THREAD_ID:
        return required("group reply", lambda: send(text, None))
    try:
        return send(text, thread_id)
    except TelegramPermanentError as error:
        if not is_topic_closed(error):
            logger.warning("group reply: permanent failure, dropped: %s", error)
            return None
    logger.info("topic %s is closed: the answer goes to General", thread_id)
    return required(
        "group reply (in General)", lambda: send(texts.closed_topic_reply(thread_id, text), None)
    )


def reply_in_thread(ctx: BotContext, *, thread_id: int, text: str) -> dict[str, Any] | None:
    """Answer in the support group's ``thread_id`` (``send_in_thread``)."""
    return send_in_thread(
        ctx,
        thread_id=thread_id,
        text=text,
        send=lambda body, thread: ctx.client.send_message(
            chat_id=ctx.support_chat_id, text=body, message_thread_id=thread
        ),
    )


def report_in_general(ctx: BotContext, text: str) -> dict[str, Any] | None:
    """Post in General (closed topics cannot receive messages)."""
    return reply_in_thread(ctx, thread_id=GENERAL_THREAD_ID, text=text)
