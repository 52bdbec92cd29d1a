"""What a broadcast's control message says in each state, and the terminal finish (spec §7.5).

The control message (a reply to the preview in General) carries the buttons while the broadcast
is pending, the progress while it sends, and the end: expired, cancelled, interrupted or the
final statistics. Once the end is shown the row is deleted — General's preview and control
message are the broadcast's only history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bots import texts
from bots.clients.telegram import TelegramError, TelegramPermanentError, is_message_not_modified
from bots.models import Broadcast, BroadcastStatus
from bots.pipeline.confirmations import NO_KEYBOARD
from bots.pipeline.context import BotContext
from bots.services.broadcast_progress import progress_forget, unknown_count
from bots.services.broadcasts import broadcast_delete, broadcasts_expire_stale

logger = logging.getLogger(__name__)


def control_keyboard(broadcast_id: int) -> dict[str, Any]:
    return {
        "inline_keyboard": [
            [
                {"text": texts.broadcast_confirm_label(), "callback_data": f"b:y:{broadcast_id}"},
                {"text": texts.cancel_label(), "callback_data": f"b:n:{broadcast_id}"},
            ]
        ]
    }


def remaining(row: Broadcast) -> int:
    return max(0, row.expected_count - row.success_count - row.failure_count)


def _with_unknown(text: str, row: Broadcast) -> str:
    unknown = unknown_count(broadcast_id=row.id)
    return f"{text}\n{texts.broadcast_unknown(unknown)}" if unknown else text


def _failures_without_unknown(row: Broadcast) -> int:
    return max(0, row.failure_count - unknown_count(broadcast_id=row.id))


def progress_text(row: Broadcast) -> str:
    return texts.broadcast_sending(
        sent=row.success_count, failed=row.failure_count, remaining=remaining(row)
    )


def final_text(row: Broadcast) -> str:
    """The end as the control message shows it (expired, cancelled, interrupted, done)."""
    if row.status == BroadcastStatus.EXPIRED:
        return texts.broadcast_expired()
    if row.status == BroadcastStatus.CANCELLED:
        return texts.broadcast_cancelled()
    if row.status == BroadcastStatus.COMPLETED:
        return _with_unknown(
            texts.broadcast_done(sent=row.success_count, failed=_failures_without_unknown(row)),
            row,
        )
    # failed (stale, wiped, stopped) — and anything unexpected, which must not claim success.
    return _with_unknown(
        texts.broadcast_interrupted(
            sent=row.success_count,
            failed=_failures_without_unknown(row),
            remaining=remaining(row),
        ),
        row,
    )


def terminal_toast(row: Broadcast) -> str:
    toasts: dict[str, Callable[[], str]] = {
        BroadcastStatus.EXPIRED: texts.toast_broadcast_expired,
        BroadcastStatus.CANCELLED: texts.toast_broadcast_cancelled,
        BroadcastStatus.COMPLETED: texts.toast_broadcast_completed,
    }
    return toasts.get(row.status, texts.toast_broadcast_interrupted)()


def edit_control(
    ctx: BotContext,
    row: Broadcast,
    text: str,
    *,
    edit: Callable[[Callable[[], object]], object] | None = None,
) -> None:
    """Replace the control message's text and remove its buttons. Retryable ⇒ raise (the caller
    decides: a redelivery, a task retry); permanent ⇒ logged ("message is not modified" is an
    edit that is already done). ``edit`` wraps the call (the send loop paces it)."""
    control_msg_id = row.control_msg_id
    if control_msg_id is None:
        return

    def call() -> object:
        return ctx.client.edit_message_text(
            chat_id=row.support_chat_id,
            message_id=control_msg_id,
            text=text,
            reply_markup=NO_KEYBOARD,
        )

    try:
        if edit is None:
            call()
        else:
            edit(call)
    except TelegramPermanentError as error:
        if not is_message_not_modified(error):
            logger.warning("broadcast %s: control message not edited: %s", row.id, error)


def finish(
    ctx: BotContext,
    row: Broadcast,
    *,
    text: str | None = None,
    edit: Callable[[Callable[[], object]], object] | None = None,
) -> str:
    """Show the row's end (``text``, or the one of its status) on its control message, then
    delete the row; returns the text shown. Retryable edit failure ⇒ raise with the row kept
    (whoever runs next finishes it)."""
    text = final_text(row) if text is None else text
    edit_control(ctx, row, text, edit=edit)
    broadcast_delete(bot_id=row.bot_id, broadcast_id=row.id)
    progress_forget(broadcast_id=row.id)
    return text


def lazy_cleanup(ctx: BotContext, *, except_id: int | None = None) -> None:
    """Spec §7.5 step 2 (on every /broadcast and every broadcast button): drafts past their
    expiry become expired, a sending row without a heartbeat for 10 minutes failed; every
    expired or failed row then shows its end and is deleted, best effort (a failed edit leaves
    the row for the next cleanup). ``except_id``: the clicked broadcast, whose own dispatch
    answers the click with its end."""
    broadcasts_expire_stale(bot_id=ctx.bot_id, now=ctx.now)
    lingering = Broadcast.objects.filter(
        bot_id=ctx.bot_id, status__in=[BroadcastStatus.EXPIRED, BroadcastStatus.FAILED]
    )
    if except_id is not None:
        lingering = lingering.exclude(id=except_id)
    for row in lingering:
        try:
            finish(ctx, row)
        except TelegramError as error:
            logger.warning("broadcast %s: cleanup left for later: %s", row.id, error)
