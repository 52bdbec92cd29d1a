"""The bulk-deletion lock in Redis: one /purgemsg or /wipealldata at a time per bot.

Purges and wipes delete messages or topics one by one at a fixed pace into the one support
group; two of them at once would double that pace (and a wipe under a running purge would pull
the topic away from it). The lock is one key holding its holder's random token, with a TTL, so
a crashed holder frees it by itself: a running holder keeps it alive with a short TTL (shorter
than Telegram's 60 s redelivery, so a redelivered command finds it free), a job waiting in the
Celery queue with a long one. Acquire is one ``SET NX PX``; hold and release are Lua scripts that
compare the token first, so nobody extends or deletes a lock that is no longer theirs.
"""

from __future__ import annotations

import secrets

from django_redis import get_redis_connection

from bots.redis_keys import bulk_deletion_lock

# Keep the lock if it is still ours; take it again if it expired and nobody took it meanwhile
# (a queued job that waited longer than its TTL); refuse if somebody else holds it.
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
if not holder then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def _redis():
    return get_redis_connection("default")


def bulk_lock_acquire(*, bot_id: int, ttl_seconds: float) -> str | None:
    """Take the bot's bulk-deletion lock; its token, or None when another job holds it."""
    token = secrets.token_hex(16)
    taken = _redis().set(bulk_deletion_lock(bot_id), token, nx=True, px=int(ttl_seconds * 1000))
    return token if taken else None


def bulk_lock_hold(*, bot_id: int, token: str, ttl_seconds: float) -> bool:
    """Extend the lock held with ``token`` to ``ttl_seconds`` (or re-take it if it lapsed and is
    free). False: another job holds it now — the caller must stop."""
    script = _redis().register_script(_HOLD)
    return script(keys=[bulk_deletion_lock(bot_id)], args=[token, int(ttl_seconds * 1000)]) == 1


def bulk_lock_release(*, bot_id: int, token: str) -> bool:
    """Release the lock if ``token`` still holds it; False when it had lapsed or changed hands."""
    script = _redis().register_script(_RELEASE)
    return script(keys=[bulk_deletion_lock(bot_id)], args=[token]) == 1
