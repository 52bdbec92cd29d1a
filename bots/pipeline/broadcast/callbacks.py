"""The buttons of a broadcast's control message, ``b:y:<id>`` / ``b:n:<id>`` (spec §7.5).

A click is checked in this order: the payload's shape (an id of 1–10 digits, positive) and the
chat (the support supergroup) — else silence; lazy cleanup; the row must exist and the click be
on its control message ("already handled or missing"); admins only; the initiator only. Then by
status:

* pending, expired ⇒ expired (shown, row deleted, "preview expired");
* pending, *Cancel* ⇒ cancelled (one conditional UPDATE; shown, row deleted);
* pending, *Confirm* ⇒ the eligible users now: none or more than BROADCAST_MAX_RECIPIENTS ⇒
  cancelled with that reason; otherwise one conditional UPDATE pending → sending freezes the
  list — the bot's one sending slot taken ⇒ "busy" (the draft stays until it expires), lost ⇒
  re-read and decide again. The winner answers "confirmed, sending" and queues the send loop
  (``bots.pipeline.broadcast.sending``) once the UPDATE is committed: the webhook answers at
  once;
* sending ⇒ "sending, please wait" (never a second loop: when no loop holds the broadcast — the
  confirming delivery died before its run was queued — a run is queued, which stops at once if a
  loop has started meanwhile);
* completed ⇒ the repair path: the final statistics shown, the row deleted (nothing resent);
* cancelled, expired, failed ⇒ their end shown, the row deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bots import texts
from bots.models import AuditAction, AuditOutcome, Broadcast, BroadcastStatus
from bots.pipeline.audit import audit_from_telegram
from bots.pipeline.broadcast.display import finish, lazy_cleanup, terminal_toast
from bots.pipeline.broadcast.jobs import start_sending
from bots.pipeline.confirmations import toast, toast_best_effort
from bots.pipeline.context import UpdateContext
from bots.selectors import broadcast_eligible_user_ids, broadcast_get
from bots.services.broadcast_audit import broadcast_detail
from bots.services.broadcast_progress import sender_lease_held
from bots.services.broadcasts import (
    BUSY,
    WON,
    broadcast_cancel,
    broadcast_confirm,
    broadcast_expire,
)

_PAYLOAD = re.compile(r"b:(y|n):([0-9]{1,10})")
# A lost conditional UPDATE means somebody else changed the row: read it again and decide anew
# (a few times at most: each round sees a newer state).
DECISION_ROUNDS = 3


def handle_broadcast_callback(ctx: UpdateContext, callback: Mapping[str, Any]) -> None:
    match = _PAYLOAD.fullmatch(callback["data"])
    if match is None or int(match[2]) == 0:
        return
    message = callback["message"]
    if message["chat"]["id"] != ctx.support_chat_id or message["chat"]["type"] != "supergroup":
        return
    broadcast_id = int(match[2])
    callback_id = callback["id"]
    clicker = callback["from"]["id"]
    lazy_cleanup(ctx, except_id=broadcast_id)
    row = broadcast_get(bot_id=ctx.bot_id, broadcast_id=broadcast_id)
    if row is None or row.control_msg_id != message["message_id"]:
        toast(ctx, callback_id, texts.toast_broadcast_missing())
        return
    if not ctx.config.is_admin(clicker):
        toast(ctx, callback_id, texts.admins_only())
        return
    if clicker != row.initiator_user_id:
        toast(ctx, callback_id, texts.toast_broadcast_not_initiator())
        return
    _decide(ctx, row, confirm=match[1] == "y", callback_id=callback_id, admin=callback["from"])


def _decide(
    ctx: UpdateContext, row: Broadcast, *, confirm: bool, callback_id: str, admin: Mapping[str, Any]
) -> None:
    for _ in range(DECISION_ROUNDS):
        if row.status != BroadcastStatus.PENDING:
            _show_state(ctx, row, callback_id=callback_id)
            return
        if row.expires_at <= ctx.now:
            broadcast_expire(bot_id=ctx.bot_id, broadcast_id=row.id, now=ctx.now)
        elif not confirm:
            if broadcast_cancel(
                bot_id=ctx.bot_id,
                broadcast_id=row.id,
                initiator_user_id=row.initiator_user_id,
                now=ctx.now,
            ):
                _audit(ctx, admin, AuditOutcome.CANCELLED, row=row)
        elif _confirm(ctx, row, callback_id=callback_id, admin=admin):
            return
        current = broadcast_get(bot_id=ctx.bot_id, broadcast_id=row.id)
        if current is None:
            toast(ctx, callback_id, texts.toast_broadcast_missing())
            return
        row = current
    toast(ctx, callback_id, texts.toast_broadcast_missing())


def _audit(
    ctx: UpdateContext,
    admin: Mapping[str, Any],
    outcome: AuditOutcome,
    *,
    row: Broadcast,
    detail: str = "",
) -> None:
    audit_from_telegram(
        ctx,
        admin=admin,
        action=AuditAction.BROADCAST,
        outcome=outcome,
        detail=broadcast_detail(row.id, detail),
    )


def _confirm(
    ctx: UpdateContext, row: Broadcast, *, callback_id: str, admin: Mapping[str, Any]
) -> bool:
    """Try pending → sending; True when this click was answered (won, busy, nobody to send
    to), False when the row changed under it (the caller re-reads)."""
    limit = ctx.config.broadcast_max_recipients
    recipients = broadcast_eligible_user_ids(bot_id=ctx.bot_id, limit=limit + 1)
    if not recipients or len(recipients) > limit:
        if not broadcast_cancel(
            bot_id=ctx.bot_id,
            broadcast_id=row.id,
            initiator_user_id=row.initiator_user_id,
            now=ctx.now,
        ):
            return False
        text = (
            texts.broadcast_nobody_to_send()
            if not recipients
            else texts.broadcast_too_many_to_send(limit)
        )
        _audit(
            ctx,
            admin,
            AuditOutcome.REFUSED,
            row=row,
            detail="nobody to send to" if not recipients else f"more than {limit} recipients",
        )
        finish(ctx, row, text=text)
        toast_best_effort(ctx, callback_id, text)
        return True
    outcome = broadcast_confirm(
        bot_id=ctx.bot_id,
        broadcast_id=row.id,
        initiator_user_id=row.initiator_user_id,
        recipient_ids=recipients,
        now=ctx.now,
    )
    if outcome == BUSY:
        toast(ctx, callback_id, texts.toast_broadcast_busy())
        return True
    if outcome != WON:
        return False
    start_sending(bot_id=ctx.bot_id, broadcast_id=row.id)
    _audit(ctx, admin, AuditOutcome.STARTED, row=row, detail=f"{len(recipients)} recipients")
    toast_best_effort(ctx, callback_id, texts.toast_broadcast_confirmed())
    return True


def _show_state(ctx: UpdateContext, row: Broadcast, *, callback_id: str) -> None:
    if row.status == BroadcastStatus.SENDING:
        if not sender_lease_held(broadcast_id=row.id):
            start_sending(bot_id=ctx.bot_id, broadcast_id=row.id)
        toast(ctx, callback_id, texts.toast_broadcast_sending())
        return
    if row.status == BroadcastStatus.PREPARING:
        toast(ctx, callback_id, texts.toast_broadcast_missing())
        return
    # completed (the repair path: the statistics edit had failed), cancelled, expired, failed
    finish(ctx, row)
    toast_best_effort(ctx, callback_id, terminal_toast(row))
