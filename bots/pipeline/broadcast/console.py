"""Stopping a broadcast from the operators' console, through the state machine's own service.

A draft (preparing, pending) is cancelled and its control message shows it at once; a running
send is failed: its loop stops before its next recipient and shows the end itself (sent /
failed / not sent) — or, if its worker died, the resume sweep's run does within a minute. The
stop of a running send is that broadcast's outcome in the audit trail (cancelled, with the
counts, in the operator's name), written with the status change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bots.clients.telegram import TelegramError
from bots.models import BroadcastStatus
from bots.pipeline.broadcast.display import finish
from bots.pipeline.context import BotContext
from bots.selectors import broadcast_get
from bots.services.audit import AuditActor
from bots.services.broadcasts import broadcast_stop


@dataclass(frozen=True)
class Stopped:
    status: str | None  # cancelled (a draft), failed (a running send), None: not in progress
    shown: bool  # the control message already shows the end (a cancelled draft)
    problem: str | None = None  # why the end is not shown yet


def stop_broadcast(
    ctx: BotContext | None,
    *,
    bot_id: int,
    broadcast_id: int,
    now: datetime,
    stopped_by: AuditActor,
) -> Stopped:
    """Stop the broadcast (``ctx`` None: the bot is not configured, so only the row changes)."""
    status = broadcast_stop(
        bot_id=bot_id, broadcast_id=broadcast_id, now=now, stopped_by=stopped_by
    )
    if status != BroadcastStatus.CANCELLED:
        return Stopped(status=status, shown=False)
    if ctx is None:
        return Stopped(status=status, shown=False)
    row = broadcast_get(bot_id=bot_id, broadcast_id=broadcast_id)
    if row is None:
        return Stopped(status=status, shown=True)
    try:
        finish(ctx, row)
    except TelegramError as error:
        return Stopped(status=status, shown=False, problem=str(error))
    return Stopped(status=status, shown=True)
