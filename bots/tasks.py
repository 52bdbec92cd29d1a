"""Celery tasks of the bot (thin: the work is in services)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from bots.services.processed_updates import processed_update_trim


@shared_task(name="bots.tasks.processed_updates_trim_task")
def processed_updates_trim_task() -> int:
    """Daily: delete idempotency claims older than 7 days; return how many were deleted.

    Idempotent (a second run finds nothing more to delete).
    """
    return processed_update_trim(now=timezone.now())
