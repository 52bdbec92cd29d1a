"""The bulk-deletion lock in Redis: one /purgemsg or /wipealldata at a time per bot.

Purges and wipes delete messages or topics one by one at a fixed pace into the one support
group; two of them at once would double that pace (and a wipe under a running purge would pull
the topic away from it). The lock is a lease (``bots.services.redis_leases``), so a crashed
holder frees it by itself: a running holder keeps it alive with a short TTL (shorter than
Telegram's 60 s redelivery, so a redelivered command finds it free), a job waiting in the
Celery queue with a long one.
"""

from __future__ import annotations

from bots.redis_keys import bulk_deletion_lock
from bots.services.redis_leases import lease_acquire, lease_hold, lease_release


def bulk_lock_acquire(*, bot_id: int, ttl_seconds: float) -> str | None:
    """Take the bot's bulk-deletion lock; its token, or None when another job holds it."""
    return lease_acquire(bulk_deletion_lock(bot_id), ttl_seconds=ttl_seconds)


def bulk_lock_hold(*, bot_id: int, token: str, ttl_seconds: float) -> bool:
    """Extend the lock held with ``token`` to ``ttl_seconds`` (or re-take it if it lapsed and is
    free). False: another job holds it now — the caller must stop."""
    return lease_hold(bulk_deletion_lock(bot_id), token=token, ttl_seconds=ttl_seconds)


def bulk_lock_release(*, bot_id: int, token: str) -> bool:
    """Release the lock if ``token`` still holds it; False when it had lapsed or changed hands."""
    return lease_release(bulk_deletion_lock(bot_id), token=token)
