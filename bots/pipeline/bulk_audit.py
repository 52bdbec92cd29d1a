"""The audit trail of a purge or wipe that ends in a Celery worker (issue #24).

Whoever starts the job records its start ("started"); the job carries who that was through its
JSON hand-off (the ``audit_*`` fields of ``PurgeJob`` and ``WipeJob``) and, when it ends in the
worker — finished, interrupted, or stopped because another job took its lock or the worker has
no bot configuration — adds the outcome's row in their name. Once per job: the row is keyed by
the job (its lock token's digest, never the token), so a last chunk that runs twice (its worker
died before the job was marked finished, and Celery delivered the chunk again) adds nothing.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from django.utils import timezone

from bots.models import AuditAction, AuditOutcome, AuditSurface
from bots.pipeline.failures import best_effort
from bots.services.audit import AuditActor, audit_job_end


class AuditedJob(Protocol):
    """What the outcome's row needs of a job: its bot, its lock token (the job's identity) and
    who started it (``audit_surface`` "" when nobody is to be named: no row is written)."""

    bot_id: int
    lock_token: str
    audit_surface: str
    audit_actor_id: int | None
    audit_actor_name: str


def carry_starter(job: AuditedJob, started_by: AuditActor | None) -> None:
    """Put who started the job on it (flattened: the job travels as JSON)."""
    if started_by is None:
        return
    job.audit_surface = started_by.surface
    job.audit_actor_id = started_by.actor_id
    job.audit_actor_name = started_by.actor_name


def job_key(action: AuditAction, job: AuditedJob) -> str:
    """The job's identity in the trail ("purge:<sha256 of its lock token>")."""
    return f"{action}:{hashlib.sha256(job.lock_token.encode()).hexdigest()}"


def audit_job_outcome(
    job: AuditedJob,
    *,
    action: AuditAction,
    outcome: AuditOutcome,
    detail: str,
    target_user_id: int | None = None,
) -> None:
    """The outcome's row of a job that ended in the worker, at most once per job. Best effort:
    the job is over whatever the database says now."""
    if not job.audit_surface:
        return
    started_by = AuditActor(
        surface=AuditSurface(job.audit_surface),
        actor_id=job.audit_actor_id,
        actor_name=job.audit_actor_name,
    )
    best_effort(
        f"{action} audit",
        lambda: audit_job_end(
            bot_id=job.bot_id,
            job=job_key(action, job),
            actor=started_by,
            action=action,
            outcome=outcome,
            now=timezone.now(),
            target_user_id=target_user_id,
            detail=detail,
        ),
    )
