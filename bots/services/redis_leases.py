"""Leases in Redis: one key holding its holder's random token, with a TTL, so a crashed holder
frees it by itself. Acquire is one ``SET NX PX``; hold and release are Lua scripts that compare
the token first, so nobody extends or deletes a lease that is no longer theirs.

Used by the bulk-deletion lock (``bots.services.bulk_lock``) and the broadcast sender
(``bots.services.broadcast_progress``).
"""

from __future__ import annotations

import secrets

from django_redis import get_redis_connection

from common.redis_scripts import COMPARE_AND_DELETE, lua_script

# Keep the lease if it is still ours; take it again if it expired and nobody took it meanwhile
# (a queued job that waited longer than its TTL); refuse if somebody else holds it.
_HOLD = lua_script("bots", "lease_hold")


def _redis():
    return get_redis_connection("default")


def lease_acquire(key: str, *, ttl_seconds: float) -> str | None:
    """Take the lease; its token, or None when somebody holds it."""
    token = secrets.token_hex(16)
    taken = _redis().set(key, token, nx=True, px=int(ttl_seconds * 1000))
    return token if taken else None


def lease_hold(key: str, *, token: str, ttl_seconds: float) -> bool:
    """Extend the lease held with ``token`` to ``ttl_seconds`` (or re-take it if it lapsed and
    is free). False: somebody else holds it now — the caller must stop."""
    script = _redis().register_script(_HOLD)
    return script(keys=[key], args=[token, int(ttl_seconds * 1000)]) == 1


def lease_release(key: str, *, token: str) -> bool:
    """Release the lease if ``token`` still holds it; False when it had lapsed or changed hands."""
    script = _redis().register_script(COMPARE_AND_DELETE)
    return script(keys=[key], args=[token]) == 1


def lease_held(key: str) -> bool:
    return bool(_redis().exists(key))
