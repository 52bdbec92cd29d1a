"""What the two confirmation prompts (/deluser, /wipealldata) share: the two-button keyboard,
the 60 s window, toasts and prompt edits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bots import texts
from bots.pipeline.context import BotContext
from bots.pipeline.failures import best_effort, required
from bots.pipeline.replies import send_in_thread

# A prompt's buttons work this long after it was sent (spec §11)...
CONFIRM_WINDOW_SECONDS = 60
# ... and a click stamped up to this much before it is still accepted (clock skew).
CLOCK_SKEW_SECONDS = 5
# An edit with this keyboard removes the buttons (omitting reply_markup would keep them).
NO_KEYBOARD: dict[str, Any] = {"inline_keyboard": []}


def epoch_seconds(now: datetime) -> int:
    return int(now.timestamp())


def within_window(started_at: int, now: datetime) -> bool:
    """The prompt stamped ``started_at`` (epoch seconds) still accepts clicks at ``now``: its age
    is at most 60 s and not below −5 s."""
    age = epoch_seconds(now) - started_at
    return -CLOCK_SKEW_SECONDS <= age <= CONFIRM_WINDOW_SECONDS


def send_prompt(
    ctx: BotContext,
    *,
    thread_id: int,
    text: str,
    confirm_label: str,
    confirm_data: str,
    cancel_data: str,
) -> dict[str, Any] | None:
    """Send a warning into the support group's ``thread_id`` with a confirm and a cancel button
    — into General when the topic is closed (``send_in_thread``: the buttons work there too).

    Returns the sent message, or None after a permanent failure (logged). Retryable ⇒ raise.
    """
    keyboard = {
        "inline_keyboard": [
            [{"text": confirm_label, "callback_data": confirm_data}],
            [{"text": texts.cancel_label(), "callback_data": cancel_data}],
        ]
    }
    return send_in_thread(
        ctx,
        thread_id=thread_id,
        text=text,
        send=lambda body, thread: ctx.client.send_message(
            chat_id=ctx.support_chat_id, text=body, message_thread_id=thread, reply_markup=keyboard
        ),
    )


def toast(ctx: BotContext, callback_id: str, text: str) -> None:
    """Answer the click. Retryable ⇒ raise (the redelivery runs the same checks again)."""
    required(
        "answerCallbackQuery",
        lambda: ctx.client.answer_callback_query(callback_query_id=callback_id, text=text),
    )


def toast_best_effort(ctx: BotContext, callback_id: str, text: str) -> None:
    """Answer the click after the decision is written; never fails the update (Telegram accepts
    one answer per click, so a redelivery's answer is refused anyway)."""
    best_effort(
        "answerCallbackQuery",
        lambda: ctx.client.answer_callback_query(callback_query_id=callback_id, text=text),
    )


def edit_prompt(ctx: BotContext, *, message_id: int, text: str) -> None:
    """Replace the prompt's text and remove its buttons, best effort."""
    best_effort(
        "prompt edit",
        lambda: ctx.client.edit_message_text(
            chat_id=ctx.support_chat_id, message_id=message_id, text=text, reply_markup=NO_KEYBOARD
        ),
    )
