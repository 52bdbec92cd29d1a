"""Writes to ``admin_audit_log``, the trail of admin actions (issue #24)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bots.models import AdminAuditEntry, AuditAction, AuditOutcome, AuditSurface

# A detail is a short description (a mode, a count), never a message body: bounded.
DETAIL_MAX_LENGTH = 500


@dataclass(frozen=True)
class AuditActor:
    """Who started an action whose outcome is recorded later, by a job (a purge or wipe
    continued in Celery, a broadcast's send loop): the surface and the admin, as the row of the
    start names them."""

    surface: AuditSurface
    actor_id: int | None = None  # the admin's Telegram id (None from the console)
    actor_name: str = ""


def audit_record(
    *,
    bot_id: int,
    surface: AuditSurface,
    action: AuditAction,
    outcome: AuditOutcome,
    now: datetime,
    actor_id: int | None = None,
    actor_name: str = "",
    target_user_id: int | None = None,
    detail: str = "",
    source_update_id: int | None = None,
    outcome_of: str = "",
) -> None:
    """Record one admin action — once per update and action: a redelivered update's row is
    skipped (``INSERT … ON CONFLICT DO NOTHING`` on the update's unique key), and so is a
    second row of the end of the job ``outcome_of`` names. Database errors propagate."""
    AdminAuditEntry.objects.bulk_create(
        [
            AdminAuditEntry(
                bot_id=bot_id,
                created_at=now,
                surface=surface,
                actor_id=actor_id,
                actor_name=actor_name[:100],
                action=action,
                target_user_id=target_user_id,
                outcome=outcome,
                detail=detail[:DETAIL_MAX_LENGTH],
                source_update_id=source_update_id,
                outcome_of=outcome_of,
            )
        ],
        ignore_conflicts=True,
    )


def audit_job_end(
    *,
    bot_id: int,
    job: str,
    actor: AuditActor,
    action: AuditAction,
    outcome: AuditOutcome,
    now: datetime,
    target_user_id: int | None = None,
    detail: str = "",
) -> None:
    """Record how the job ``job`` ended ("purge:<id>", "broadcast:<id>", ...) in the name of
    ``actor`` (who started it, or who stopped it) — once: a second call for the same job writes
    nothing."""
    audit_record(
        bot_id=bot_id,
        surface=actor.surface,
        action=action,
        outcome=outcome,
        now=now,
        actor_id=actor.actor_id,
        actor_name=actor.actor_name,
        target_user_id=target_user_id,
        detail=detail,
        outcome_of=job,
    )


def audit_trim(*, now: datetime, retention_days: int) -> int:
    """Delete entries older than ``retention_days``; returns how many were deleted."""
    deleted, _ = AdminAuditEntry.objects.filter(
        created_at__lt=now - timedelta(days=retention_days)
    ).delete()
    return deleted
