"""The audit trail of a broadcast's end (issue #24).

The confirm's row says "started" (``bots.pipeline.broadcast.callbacks``); the send loop runs in
a Celery worker, so the end is recorded by whatever moves the row out of ``sending``, in the
same transaction as that status change (``bots.services.broadcasts``): completed (done, in the
name of the admin who confirmed it), stopped from the console or by /wipealldata (cancelled,
in the name of the operator or admin who stopped it), or left without a heartbeat (failed:
interrupted, in the confirming admin's name) — each with the counts. The status changes are
conditional UPDATEs only one caller wins, so a loop resumed after a crash that finds the row
completed writes nothing; the row is also keyed by the broadcast (``outcome_of``), so no second
outcome row can exist.
"""

from __future__ import annotations

from datetime import datetime

from bots.models import (
    AdminAuditEntry,
    AuditAction,
    AuditOutcome,
    AuditSurface,
    Broadcast,
)
from bots.services.audit import AuditActor, audit_job_end


def broadcast_detail(broadcast_id: int, detail: str = "") -> str:
    """A broadcast row's detail: "broadcast 12", or "broadcast 12: <detail>"."""
    return f"broadcast {broadcast_id}" + (f": {detail}" if detail else "")


def broadcast_counts(row: Broadcast) -> str:
    """What became of the recipients so far (a send in flight counts as failed until its
    success is recorded)."""
    not_sent = max(0, row.expected_count - row.success_count - row.failure_count)
    counts = f"sent {row.success_count}, failed {row.failure_count}"
    return f"{counts}, not sent {not_sent} of {row.expected_count}"


def broadcast_initiator(row: Broadcast) -> AuditActor:
    """The admin who confirmed the broadcast (only its initiator may), named as the confirm's
    row names them."""
    name = (
        AdminAuditEntry.objects.filter(
            bot_id=row.bot_id,
            action=AuditAction.BROADCAST,
            outcome=AuditOutcome.STARTED,
            actor_id=row.initiator_user_id,
            detail__startswith=f"{broadcast_detail(row.id)}:",
        )
        .order_by("-id")
        .values_list("actor_name", flat=True)
        .first()
    )
    return AuditActor(
        surface=AuditSurface.TELEGRAM, actor_id=row.initiator_user_id, actor_name=name or ""
    )


def broadcast_end_record(
    row: Broadcast,
    *,
    outcome: AuditOutcome,
    how: str,
    actor: AuditActor | None,
    now: datetime,
) -> None:
    """The outcome's row of the broadcast ``row`` (its counts as stored now), in the name of
    ``actor`` (None: the admin who confirmed it). Called inside the status change's
    transaction; database errors propagate (and undo the change)."""
    audit_job_end(
        bot_id=row.bot_id,
        job=f"{AuditAction.BROADCAST}:{row.id}",
        actor=actor or broadcast_initiator(row),
        action=AuditAction.BROADCAST,
        outcome=outcome,
        now=now,
        detail=broadcast_detail(row.id, f"{how}: {broadcast_counts(row)}"),
    )
