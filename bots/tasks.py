"""Celery tasks of the bot (thin: the work is in services and the pipeline)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from bots.conf import load_config
from bots.pipeline.albums import flush_album, sweep_albums
from bots.pipeline.broadcast.jobs import SendJob, broadcasts_resume
from bots.pipeline.broadcast.sending import run_send_job
from bots.pipeline.inbox_work import drain_inbox
from bots.pipeline.purge import PurgeJob, continue_purge
from bots.pipeline.wipe import WipeJob, continue_wipe
from bots.services.audit import audit_trim
from bots.services.processed_updates import processed_update_trim
from bots.task_names import (
    ALBUM_FLUSH_TASK,
    BROADCAST_SEND_TASK,
    INBOX_DRAIN_TASK,
    PURGE_CONTINUE_TASK,
    WIPE_CONTINUE_TASK,
)


@shared_task(name="bots.tasks.processed_updates_trim_task")
def processed_updates_trim_task() -> int:
    """Daily: delete idempotency claims older than 7 days; return how many were deleted.

    Idempotent (a second run finds nothing more to delete).
    """
    return processed_update_trim(now=timezone.now())


@shared_task(name="bots.tasks.admin_audit_trim_task")
def admin_audit_trim_task() -> int:
    """Daily: delete audit-trail rows older than AUDIT_RETENTION_DAYS; return how many.

    Idempotent (a second run finds nothing more to delete).
    """
    return audit_trim(now=timezone.now(), retention_days=load_config().audit_retention_days)


@shared_task(name=ALBUM_FLUSH_TASK, soft_time_limit=60, time_limit=90)
def album_flush_task(*, bot_id: int, media_group_id: str) -> str:
    """Relay an album's collected items as one album; returns what happened.

    Idempotent: the items are taken under row locks and deleted with their ledger rows, so a
    redelivered or duplicate flush finds nothing left to send.
    """
    return flush_album(bot_id=bot_id, media_group_id=media_group_id)


@shared_task(name="bots.tasks.albums_sweep_task")
def albums_sweep_task() -> int:
    """Every minute: flush the albums whose queued flush was lost; returns how many."""
    return sweep_albums()


@shared_task(name=INBOX_DRAIN_TASK, bind=True, soft_time_limit=150, time_limit=180)
def inbox_drain_task(self, *, bot_id: int | None = None) -> int:
    """Work on the inbox's due updates (queued by the webhook, by a row given back for later,
    by an album sent, and every INBOX_SWEEP_SECONDS by beat without ``bot_id``: the bot the
    worker is configured for); returns how many attempts it made.

    Idempotent: each row is leased before it is worked on (one holder at a time), and a
    finished update is never worked on again (its claim is settled, its row deleted).
    """
    bot_id = load_config().bot_id if bot_id is None else bot_id
    if bot_id is None:
        return 0
    queue = (self.request.delivery_info or {}).get("routing_key")
    return drain_inbox(bot_id=bot_id, queue=queue).worked


@shared_task(name=PURGE_CONTINUE_TASK)
def purge_continue_task(*, job: dict) -> str | None:
    """The rest of a /purgemsg that outgrew the webhook's budget, one chunk per run (each chunk
    queues the next); returns the report posted in the topic when the purge finished.

    Idempotent: a chunk redelivered after a crash resumes from the cursor it was given
    (messages it had deleted answer "already gone").
    """
    return continue_purge(PurgeJob(**job))


@shared_task(name=WIPE_CONTINUE_TASK)
def wipe_continue_task(*, job: dict) -> str | None:
    """The rest of a confirmed /wipealldata, one chunk per run; returns the outcome posted in
    General when the wipe ended. Idempotent like ``purge_continue_task``."""
    return continue_wipe(WipeJob(**job))


@shared_task(name=BROADCAST_SEND_TASK, bind=True)
def broadcast_send_task(
    self, *, bot_id: int, broadcast_id: int, lease_token: str | None = None, retries: int = 0
) -> str:
    """One run of a confirmed broadcast's send loop (at most 120 s; each run queues the next on
    the queue it came from); returns what the run ended with.

    Idempotent: the row's counts are the cursor, every send is claimed first, so a run
    redelivered after its worker died resumes after the last claimed recipient and never sends
    to anybody twice; a run whose broadcast has another live loop, or no row, does nothing.
    """
    queue = (self.request.delivery_info or {}).get("routing_key")
    return run_send_job(
        SendJob(bot_id=bot_id, broadcast_id=broadcast_id, lease_token=lease_token, retries=retries),
        queue=queue,
    )


@shared_task(name="bots.tasks.broadcasts_resume_task", bind=True)
def broadcasts_resume_task(self) -> list[int]:
    """Every minute (beat) and when a worker starts: queue a run for each sending broadcast
    without a live loop (its worker died); returns their ids. Idempotent."""
    return broadcasts_resume(queue=(self.request.delivery_info or {}).get("routing_key"))
