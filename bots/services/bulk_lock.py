"""The bulk-deletion lock in Redis: one /purgemsg or /wipealldata at a time per bot.

Purges and wipes delete messages or topics one by one at a fixed pace into the one support
group; two of them at once would double that pace (and a wipe under a running purge would pull
the topic away from it). The lock is a lease (``bots.services.redis_leases``), so a crashed
holder frees it by itself: a running holder keeps it alive with a short TTL (shorter than
Telegram's 60 s redelivery, so a redelivered command finds it free), a job waiting in the
Celery queue with a long one.
"""

from __future__ import annotations

import hashlib

from django_redis import get_redis_connection

from bots.redis_keys import bulk_deletion_lock, bulk_job_finished
from bots.services.redis_leases import lease_acquire, lease_hold, lease_release

# Longer than Celery keeps redelivering a message (the broker's one-hour visibility timeout).
FINISHED_MARKER_TTL_SECONDS = 2 * 24 * 3600


def bulk_lock_acquire(*, bot_id: int, ttl_seconds: float) -> str | None:
    """Take the bot's bulk-deletion lock; its token, or None when another job holds it."""
    return lease_acquire(bulk_deletion_lock(bot_id), ttl_seconds=ttl_seconds)


def bulk_lock_hold(*, bot_id: int, token: str, ttl_seconds: float) -> bool:
    """Extend the lock held with ``token`` to ``ttl_seconds`` (or re-take it if it lapsed and is
    free). False: another job holds it now — the caller must stop."""
    return lease_hold(bulk_deletion_lock(bot_id), token=token, ttl_seconds=ttl_seconds)


def bulk_lock_release(*, bot_id: int, token: str) -> bool:
    """The job holding ``token`` ended: remember that (so that a late continuation of it — a
    redelivered Celery message, say — stops instead of re-taking the lapsed lock and deleting
    what was created since), then release the lock if ``token`` still holds it. False when it
    had lapsed or changed hands."""
    _redis().set(bulk_job_finished(bot_id, _digest(token)), "1", ex=FINISHED_MARKER_TTL_SECONDS)
    return lease_release(bulk_deletion_lock(bot_id), token=token)


def bulk_job_has_finished(*, bot_id: int, token: str) -> bool:
    """Did the job holding ``token`` end already (``bulk_lock_release``)?"""
    return bool(_redis().exists(bulk_job_finished(bot_id, _digest(token))))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _redis():
    return get_redis_connection("default")
