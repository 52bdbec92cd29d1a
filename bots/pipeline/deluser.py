"""/deluser (spec §4.8): a warning with two buttons, then a physical delete on confirmation.

The command sends the prompt into the user's topic and records it in ``delete_confirmations``;
nothing is deleted yet. A click (``d:yes|no:<user>:<thread>:<epoch>``) is checked in this order:
the payload's shape, the chat (the support supergroup) and thread, the clicker (admins only),
the prompt's row (it must exist and match user, thread and epoch), then the 60 s window (−5 s
skew). Cancel and confirm are single conditional UPDATEs from ``pending`` (first click wins);
the confirm stores the winning callback id, so Telegram's redelivery of that callback — and only
of that one — carries on after a crash between Telegram's delete and the database delete.

The deletion itself (``delete_user_everywhere``, shared with the operators' console):
``deleteForumTopic`` (retryable ⇒ raise; topic already gone ⇒ fine; refused ⇒ nothing deleted),
then one transaction deleting the user's ledger rows, binding, users row and prompts. The user
is a stranger afterwards: their next message starts a brand-new profile, verification and topic.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from bots import texts
from bots.clients.telegram import TelegramPermanentError, is_topic_gone
from bots.conf import MAX_SAFE_INTEGER
from bots.models import AuditAction, AuditOutcome, ConfirmationStatus, DeleteConfirmation, Topic
from bots.pipeline.audit import audit_from_telegram
from bots.pipeline.confirmations import (
    edit_prompt,
    epoch_seconds,
    send_prompt,
    toast,
    toast_best_effort,
    within_window,
)
from bots.pipeline.context import BotContext, UpdateContext
from bots.pipeline.inbox_queue import queue_drain
from bots.pipeline.issued import Issued
from bots.selectors import binding_exists, delete_confirmation_get, topic_get_for_user, user_get
from bots.services.deletion import (
    delete_confirmation_cancel,
    delete_confirmation_confirm,
    delete_confirmation_create,
    user_delete_data,
)
from bots.services.deletion_fence import deletion_fence_lower, deletion_fence_raise

logger = logging.getLogger(__name__)

# How long a user's deletion fences their inbound messages at most (a crash between Telegram's
# delete and the database's: Telegram's redelivery of the confirm comes well within this).
USER_FENCE_SECONDS = 15 * 60.0

_PAYLOAD = re.compile(r"d:(yes|no):([0-9]{1,16}):([0-9]{1,16}):([0-9]{1,12})")


def request_user_deletion(issued: Issued, topic: Topic) -> bool:
    """The command: send the prompt into the topic (into General when the topic is closed),
    then record it (pending). True when the prompt was posted.

    Prompt send retryable ⇒ raise; permanent ⇒ logged, nothing recorded.
    """
    ctx = issued.ctx
    started_at = epoch_seconds(ctx.now)
    payload = f"{topic.user_id}:{topic.thread_id}:{started_at}"
    sent = send_prompt(
        ctx,
        thread_id=topic.thread_id,
        text=texts.deluser_prompt(topic.user_id),
        confirm_label=texts.deluser_confirm_label(),
        confirm_data=f"d:yes:{payload}",
        cancel_data=f"d:no:{payload}",
    )
    if sent is None:
        return False
    delete_confirmation_create(
        bot_id=ctx.bot_id,
        prompt_msg_id=sent["message_id"],
        user_id=topic.user_id,
        thread_id=topic.thread_id,
        started_at=started_at,
    )
    return True


def delete_user_everywhere(ctx: BotContext, *, user_id: int, thread_id: int | None) -> bool:
    """Delete the user's topic in Telegram, then all their rows (one transaction).

    ``thread_id`` None: the user has no topic, only rows are deleted. False: Telegram refused to
    delete the topic for a reason other than "already gone" — nothing was deleted. Retryable
    Telegram errors raise before anything is deleted in the database.
    """
    # From here until the rows are gone, no message of the user replaces the topic deleted
    # below (bots.services.deletion_fence); a crash in between leaves the fence up for the
    # redelivery that finishes the job (or until it lapses).
    deletion_fence_raise(bot_id=ctx.bot_id, user_id=user_id, ttl_seconds=USER_FENCE_SECONDS)
    if thread_id is not None:
        try:
            ctx.client.delete_forum_topic(chat_id=ctx.support_chat_id, message_thread_id=thread_id)
        except TelegramPermanentError as error:
            if not is_topic_gone(error):
                logger.warning("deluser: topic %s not deleted: %s", thread_id, error)
                deletion_fence_lower(bot_id=ctx.bot_id, user_id=user_id)
                return False
    user_delete_data(bot_id=ctx.bot_id, user_id=user_id)
    deletion_fence_lower(bot_id=ctx.bot_id, user_id=user_id)
    queue_drain(bot_id=ctx.bot_id)  # the user's updates that waited for the deletion
    return True


# ------------------------------------------------------------------ the buttons


def _payload(data: str) -> tuple[bool, int, int, int] | None:
    """(confirm?, user id, thread id, epoch) of a well-formed ``d:`` payload, else None."""
    match = _PAYLOAD.fullmatch(data)
    if match is None:
        return None
    user_id, thread_id, started_at = (int(match[group]) for group in (2, 3, 4))
    if not all(0 < number <= MAX_SAFE_INTEGER for number in (user_id, thread_id, started_at)):
        return None
    return match[1] == "yes", user_id, thread_id, started_at


def handle_deletion_callback(ctx: UpdateContext, callback: Mapping[str, Any]) -> None:
    """A click on a /deluser prompt; the order of the checks is spec §4.8's."""
    parsed = _payload(callback["data"])
    if parsed is None:
        return
    confirm, user_id, thread_id, started_at = parsed
    message = callback["message"]
    if message["chat"]["id"] != ctx.support_chat_id or message["chat"]["type"] != "supergroup":
        return
    if "message_thread_id" in message and message["message_thread_id"] != thread_id:
        return  # a payload that does not belong to the topic it was clicked in
    callback_id = callback["id"]
    if not ctx.config.is_admin(callback["from"]["id"]):
        toast(ctx, callback_id, texts.admins_only())
        return
    prompt_id = message["message_id"]
    row = delete_confirmation_get(bot_id=ctx.bot_id, prompt_msg_id=prompt_id)
    if row is None or (row.user_id, row.thread_id, row.started_at) != (
        user_id,
        thread_id,
        started_at,
    ):
        if confirm and row is None and _already_deleted(ctx, user_id=user_id):
            # A redelivery after the deletion committed (the rows, prompts included, are gone).
            toast_best_effort(ctx, callback_id, texts.toast_deluser_done())
            return
        toast(ctx, callback_id, texts.toast_deluser_failed())
        return
    expired = not within_window(started_at, ctx.now)
    admin = callback["from"]
    if confirm:
        _confirm(ctx, row, callback_id=callback_id, expired=expired, admin=admin)
    else:
        _cancel(ctx, row, callback_id=callback_id, expired=expired, admin=admin)


def _already_deleted(ctx: BotContext, *, user_id: int) -> bool:
    """Neither the user nor a binding of theirs exists (any more)."""
    topic = topic_get_for_user(bot_id=ctx.bot_id, user_id=user_id)
    return topic is None and user_get(bot_id=ctx.bot_id, user_id=user_id) is None


def _expire(ctx: BotContext, row: DeleteConfirmation, callback_id: str) -> None:
    toast(ctx, callback_id, texts.deluser_expired())
    edit_prompt(ctx, message_id=row.prompt_msg_id, text=texts.deluser_expired())


def _cancel(
    ctx: UpdateContext,
    row: DeleteConfirmation,
    *,
    callback_id: str,
    expired: bool,
    admin: Mapping[str, Any],
) -> None:
    if row.status == ConfirmationStatus.CONFIRMED:
        toast(ctx, callback_id, texts.toast_deluser_failed())
        return
    if row.status == ConfirmationStatus.PENDING:
        if expired:
            _expire(ctx, row, callback_id)
            return
        if not delete_confirmation_cancel(bot_id=ctx.bot_id, prompt_msg_id=row.prompt_msg_id):
            # Lost the race: a confirm (failure) or another cancel (fine) came first.
            decided = delete_confirmation_get(bot_id=ctx.bot_id, prompt_msg_id=row.prompt_msg_id)
            if decided is None or decided.status != ConfirmationStatus.CANCELLED:
                toast(ctx, callback_id, texts.toast_deluser_failed())
                return
    # Cancelled — by this click, or by an earlier one (a repeat shows the same outcome).
    audit_from_telegram(
        ctx,
        admin=admin,
        action=AuditAction.DELETE_USER,
        outcome=AuditOutcome.CANCELLED,
        target_user_id=row.user_id,
    )
    toast(ctx, callback_id, texts.deluser_cancelled())
    edit_prompt(ctx, message_id=row.prompt_msg_id, text=texts.deluser_cancelled())


def _confirm(
    ctx: UpdateContext,
    row: DeleteConfirmation,
    *,
    callback_id: str,
    expired: bool,
    admin: Mapping[str, Any],
) -> None:
    if row.status == ConfirmationStatus.CANCELLED:
        toast(ctx, callback_id, texts.toast_deluser_failed())
        return
    if row.status == ConfirmationStatus.CONFIRMED and row.confirm_callback_id != callback_id:
        toast(ctx, callback_id, texts.toast_deluser_failed())
        return
    if row.status == ConfirmationStatus.PENDING and expired:
        _expire(ctx, row, callback_id)
        return
    if not binding_exists(bot_id=ctx.bot_id, user_id=row.user_id, thread_id=row.thread_id):
        toast(ctx, callback_id, texts.toast_deluser_failed())
        return
    if row.status == ConfirmationStatus.PENDING and not delete_confirmation_confirm(
        bot_id=ctx.bot_id, prompt_msg_id=row.prompt_msg_id, callback_id=callback_id
    ):
        # Lost: carry on only if this very callback won (a concurrent delivery of it).
        decided = delete_confirmation_get(bot_id=ctx.bot_id, prompt_msg_id=row.prompt_msg_id)
        if (
            decided is None
            or decided.status != ConfirmationStatus.CONFIRMED
            or decided.confirm_callback_id != callback_id
        ):
            toast(ctx, callback_id, texts.toast_deluser_failed())
            return
    deleted = delete_user_everywhere(ctx, user_id=row.user_id, thread_id=row.thread_id)
    audit_from_telegram(
        ctx,
        admin=admin,
        action=AuditAction.DELETE_USER,
        outcome=AuditOutcome.DONE if deleted else AuditOutcome.FAILED,
        target_user_id=row.user_id,
    )
    if not deleted:
        toast(ctx, callback_id, texts.toast_deluser_failed())
        return
    # No prompt edit: the prompt went with the topic.
    toast_best_effort(ctx, callback_id, texts.toast_deluser_done())
