"""Writes of ``broadcasts`` (spec §7.3–§7.5, seed "broadcasts"): the state machine of a
/broadcast and the send loop's progress.

    preparing → pending → sending → completed
    pending → cancelled | expired;  preparing/pending → expired (lazy cleanup)
    sending → failed (stale, wiped, or stopped from the operators' console)

One row per broadcast, deleted once its control message shows the end. Every transition is one
conditional UPDATE whose row count decides it; the two partial unique indexes decide the rest:
at most one draft (preparing or pending) per bot, at most one sending (a draft may coexist with
it). A confirm that would make a second ``sending`` row fails on the index: "busy".

**Progress is persisted as the loop goes** (the seed writes the counts once at the end; see the
docs/departures.md): ``success_count + failure_count`` is the index of the next recipient of the
frozen list. Before each send the loop *claims* the recipient — one UPDATE adding it to
``failure_count`` (and refreshing ``updated_at``, the heartbeat), only while the row is still
``sending`` and the count still stands at that index. An accepted send then moves it from the
failures to the successes. A loop that dies between the two leaves it counted as a failure: it
is never sent again (at most once), and a second loop can never claim the same index.

**Every way out of ``sending`` records the broadcast's outcome in the audit trail** in the same
transaction (``bots.services.broadcast_audit``): completed, stopped (console, /wipealldata),
stale. Only one of them can win the row, so there is exactly one outcome row per broadcast.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet

from bots.models import AuditOutcome, Broadcast, BroadcastStatus
from bots.services.audit import AuditActor
from bots.services.broadcast_audit import broadcast_end_record

DRAFT_STATES = (BroadcastStatus.PREPARING, BroadcastStatus.PENDING)
TERMINAL_STATES = (
    BroadcastStatus.COMPLETED,
    BroadcastStatus.CANCELLED,
    BroadcastStatus.EXPIRED,
    BroadcastStatus.FAILED,
)
# A preview may be confirmed this long after it was created (spec §11).
PREVIEW_TTL = timedelta(minutes=5)
# A sending row whose heartbeat is this old belongs to a loop that is gone (spec §11). The loop
# refreshes it with every recipient and every few seconds while it waits.
SENDING_STALE_AFTER = timedelta(minutes=10)

WON = "won"
LOST = "lost"  # the row was not (or no longer) pending, unexpired and the initiator's
BUSY = "busy"  # another broadcast of the bot is sending


def broadcast_create(
    *,
    bot_id: int,
    source_update_id: int,
    initiator_user_id: int,
    support_chat_id: int,
    message_html: str,
    now: datetime,
) -> Broadcast | None:
    """Insert the draft (``preparing``, confirmable for PREVIEW_TTL); None when the insert clashed
    with another draft of the bot or a row of the same update (re-read to tell which)."""
    try:
        with transaction.atomic():
            return Broadcast.objects.create(
                bot_id=bot_id,
                source_update_id=source_update_id,
                initiator_user_id=initiator_user_id,
                support_chat_id=support_chat_id,
                message_html=message_html,
                status=BroadcastStatus.PREPARING,
                expires_at=now + PREVIEW_TTL,
                created_at=now,
                updated_at=now,
            )
    except IntegrityError:
        return None


def broadcast_attach_preview(
    *, bot_id: int, broadcast_id: int, preview_msg_id: int, now: datetime
) -> bool:
    """Store the preview's message id on a preparing row that has none yet."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id,
            id=broadcast_id,
            status=BroadcastStatus.PREPARING,
            preview_msg_id__isnull=True,
        ).update(preview_msg_id=preview_msg_id, updated_at=now)
        == 1
    )


def broadcast_publish(
    *, bot_id: int, broadcast_id: int, control_msg_id: int, now: datetime
) -> bool:
    """preparing → pending with the control message's id (only once the preview is stored): the
    buttons work from now on."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id,
            id=broadcast_id,
            status=BroadcastStatus.PREPARING,
            preview_msg_id__isnull=False,
        ).update(control_msg_id=control_msg_id, status=BroadcastStatus.PENDING, updated_at=now)
        == 1
    )


def broadcast_cancel(
    *, bot_id: int, broadcast_id: int, initiator_user_id: int | None, now: datetime
) -> bool:
    """pending → cancelled while unexpired, by its initiator (None: by an operator of the
    console, who may cancel any draft)."""
    rows = Broadcast.objects.filter(
        bot_id=bot_id, id=broadcast_id, status=BroadcastStatus.PENDING, expires_at__gt=now
    )
    if initiator_user_id is not None:
        rows = rows.filter(initiator_user_id=initiator_user_id)
    return rows.update(status=BroadcastStatus.CANCELLED, updated_at=now) == 1


def broadcast_expire(*, bot_id: int, broadcast_id: int, now: datetime) -> bool:
    """pending → expired once its preview's time is up."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id, id=broadcast_id, status=BroadcastStatus.PENDING, expires_at__lte=now
        ).update(status=BroadcastStatus.EXPIRED, updated_at=now)
        == 1
    )


def broadcast_confirm(
    *,
    bot_id: int,
    broadcast_id: int,
    initiator_user_id: int,
    recipient_ids: Sequence[int],
    now: datetime,
) -> str:
    """pending → sending with the frozen recipient list (ascending), by its initiator while
    unexpired. WON, LOST (not pending, expired or not theirs any more: re-read) or BUSY (the
    bot's one sending slot is taken: the draft stays pending until it expires)."""
    try:
        with transaction.atomic():
            changed = Broadcast.objects.filter(
                bot_id=bot_id,
                id=broadcast_id,
                status=BroadcastStatus.PENDING,
                initiator_user_id=initiator_user_id,
                expires_at__gt=now,
            ).update(
                status=BroadcastStatus.SENDING,
                recipient_ids_json=json.dumps(list(recipient_ids), separators=(",", ":")),
                expected_count=len(recipient_ids),
                success_count=0,
                failure_count=0,
                confirmed_at=now,
                updated_at=now,
            )
    except IntegrityError:
        return BUSY
    return WON if changed == 1 else LOST


def broadcast_claim_recipient(*, bot_id: int, broadcast_id: int, index: int, now: datetime) -> bool:
    """Claim the recipient at ``index`` of the frozen list before sending to it: counted as a
    failure until ``broadcast_record_success`` says otherwise, heartbeat refreshed. False when
    the row left ``sending`` (wiped, stopped, stale) or another loop claimed that index already:
    stop before sending."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id,
            id=broadcast_id,
            status=BroadcastStatus.SENDING,
            success_count=index - F("failure_count"),
        ).update(failure_count=F("failure_count") + 1, updated_at=now)
        == 1
    )


def broadcast_unclaim_recipient(
    *, bot_id: int, broadcast_id: int, index: int, now: datetime
) -> bool:
    """Give back the claim on ``index`` — only for a send Telegram refused with 429, which it
    never delivered — so that whoever runs next sends to that recipient after all."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id,
            id=broadcast_id,
            status=BroadcastStatus.SENDING,
            failure_count__gt=0,
            success_count=index + 1 - F("failure_count"),
        ).update(failure_count=F("failure_count") - 1, updated_at=now)
        == 1
    )


def broadcast_record_success(*, bot_id: int, broadcast_id: int) -> bool:
    """Telegram accepted the claimed send: one failure becomes a success. (Whatever the row's
    status now: the count stays true when a wipe or a stop landed during the call.)"""
    return (
        Broadcast.objects.filter(bot_id=bot_id, id=broadcast_id, failure_count__gt=0).update(
            failure_count=F("failure_count") - 1, success_count=F("success_count") + 1
        )
        == 1
    )


def broadcast_fail_remaining(*, bot_id: int, broadcast_id: int, now: datetime) -> bool:
    """Count every recipient not handled yet as a failure (a recipient list that cannot be
    decoded sends nothing)."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id, id=broadcast_id, status=BroadcastStatus.SENDING
        ).update(failure_count=F("expected_count") - F("success_count"), updated_at=now)
        == 1
    )


def broadcast_heartbeat(*, bot_id: int, broadcast_id: int, now: datetime) -> bool:
    """The loop lives (while it waits): refresh ``updated_at``; False when the row left
    ``sending``."""
    return (
        Broadcast.objects.filter(
            bot_id=bot_id, id=broadcast_id, status=BroadcastStatus.SENDING
        ).update(updated_at=now)
        == 1
    )


def broadcast_complete(*, bot_id: int, broadcast_id: int, now: datetime) -> bool:
    """sending → completed once every recipient is counted, with the outcome's audit row (in
    the name of the admin who confirmed it)."""
    with transaction.atomic():
        if (
            Broadcast.objects.filter(
                bot_id=bot_id,
                id=broadcast_id,
                status=BroadcastStatus.SENDING,
                success_count=F("expected_count") - F("failure_count"),
            ).update(status=BroadcastStatus.COMPLETED, updated_at=now)
            != 1
        ):
            return False
        row = Broadcast.objects.get(bot_id=bot_id, id=broadcast_id)
        broadcast_end_record(row, outcome=AuditOutcome.DONE, how="completed", actor=None, now=now)
    return True


def _end_sending(
    rows: QuerySet[Broadcast],
    *,
    outcome: AuditOutcome,
    how: str,
    actor: AuditActor | None,
    now: datetime,
) -> int:
    """sending → failed for each of ``rows`` (still sending, still matching ``rows``' filter),
    each with its outcome's audit row in the same transaction; how many changed."""
    sending = rows.filter(status=BroadcastStatus.SENDING)
    changed = 0
    for bot_id, broadcast_id in sending.order_by("id").values_list("bot_id", "id"):
        with transaction.atomic():
            # The row lock of the conditional UPDATE keeps the counts still until the commit.
            rows_changed = sending.filter(id=broadcast_id).update(
                status=BroadcastStatus.FAILED, updated_at=now
            )
            if rows_changed != 1:
                continue
            ended = Broadcast.objects.get(bot_id=bot_id, id=broadcast_id)
            broadcast_end_record(ended, outcome=outcome, how=how, actor=actor, now=now)
            changed += 1
    return changed


def broadcast_stop(
    *, bot_id: int, broadcast_id: int, now: datetime, stopped_by: AuditActor
) -> str | None:
    """An operator stops a broadcast: a draft becomes ``cancelled``, a running send ``failed``
    (its loop stops before the next recipient; its outcome's audit row, cancelled with the
    counts, names ``stopped_by``). Returns the new status, None when the row was not in
    progress any more."""
    if (
        Broadcast.objects.filter(bot_id=bot_id, id=broadcast_id, status__in=DRAFT_STATES).update(
            status=BroadcastStatus.CANCELLED, updated_at=now
        )
        == 1
    ):
        return BroadcastStatus.CANCELLED
    if _end_sending(
        Broadcast.objects.filter(bot_id=bot_id, id=broadcast_id),
        outcome=AuditOutcome.CANCELLED,
        how="stopped from the console while sending",
        actor=stopped_by,
        now=now,
    ):
        return BroadcastStatus.FAILED
    return None


def broadcasts_stop(*, bot_id: int, now: datetime, stopped_by: AuditActor) -> int:
    """/wipealldata: cancel the drafts (preparing, pending) and fail the running send (its loop
    stops before the next recipient; its outcome's audit row, cancelled with the counts, names
    ``stopped_by``); the number of rows changed."""
    drafts = Broadcast.objects.filter(bot_id=bot_id, status__in=DRAFT_STATES).update(
        status=BroadcastStatus.CANCELLED, updated_at=now
    )
    sending = _end_sending(
        Broadcast.objects.filter(bot_id=bot_id),
        outcome=AuditOutcome.CANCELLED,
        how="stopped by /wipealldata while sending",
        actor=stopped_by,
        now=now,
    )
    return drafts + sending


def broadcasts_expire_stale(*, bot_id: int, now: datetime) -> int:
    """Lazy cleanup's transitions: drafts past their expiry → expired; a sending row whose
    heartbeat is SENDING_STALE_AFTER old → failed (its outcome's audit row: failed, interrupted,
    with the counts, in the name of the admin who confirmed it). The number of rows changed."""
    drafts = Broadcast.objects.filter(
        bot_id=bot_id, status__in=DRAFT_STATES, expires_at__lte=now
    ).update(status=BroadcastStatus.EXPIRED, updated_at=now)
    stale = _end_sending(
        Broadcast.objects.filter(bot_id=bot_id, updated_at__lte=now - SENDING_STALE_AFTER),
        outcome=AuditOutcome.FAILED,
        how=f"interrupted (no progress for {SENDING_STALE_AFTER.seconds // 60} minutes)",
        actor=None,
        now=now,
    )
    return drafts + stale


def broadcast_delete(*, bot_id: int, broadcast_id: int) -> None:
    """The end is shown: the row goes (General's messages are the only history)."""
    Broadcast.objects.filter(bot_id=bot_id, id=broadcast_id).delete()
