"""Celery tasks of the bot (thin: the work is in services and the pipeline)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from bots.pipeline.purge import PurgeJob, continue_purge
from bots.pipeline.wipe import WipeJob, continue_wipe
from bots.services.processed_updates import processed_update_trim


@shared_task(name="bots.tasks.processed_updates_trim_task")
def processed_updates_trim_task() -> int:
    """Daily: delete idempotency claims older than 7 days; return how many were deleted.

    Idempotent (a second run finds nothing more to delete).
    """
    return processed_update_trim(now=timezone.now())


@shared_task(name="bots.tasks.purge_continue_task")
def purge_continue_task(*, job: dict) -> str | None:
    """The rest of a /purgemsg that outgrew the webhook's budget, one chunk per run (each chunk
    queues the next); returns the report posted in the topic when the purge finished.

    Idempotent: a chunk redelivered after a crash resumes from the cursor it was given
    (messages it had deleted answer "already gone").
    """
    return continue_purge(PurgeJob(**job))


@shared_task(name="bots.tasks.wipe_continue_task")
def wipe_continue_task(*, job: dict) -> str | None:
    """The rest of a confirmed /wipealldata, one chunk per run; returns the outcome posted in
    General when the wipe ended. Idempotent like ``purge_continue_task``."""
    return continue_wipe(WipeJob(**job))
