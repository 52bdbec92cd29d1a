"""Token-refresh leases (seed 004 §4B.2): one refresher per account across all processes.

Acquire is ``SET key owner NX PX ttl``; renew and release compare the owner inside a Lua script
(never GET-check-SET from the client). A crashed holder's lease simply expires.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.redis_scripts import COMPARE_AND_DELETE, lua_script
from proxy import redis_keys
from proxy.runtime_state import redis_client

# KEYS[1] = lease key, ARGV[1] = owner, ARGV[2] = ttl ms
_RENEW_IF_OWNER = lua_script("proxy", "refresh_lease_renew")


def refresh_lease_acquire(*, account_id: str, owner: str, ttl_ms: int) -> bool:
    """Take the lease, or renew it when ``owner`` already holds it (re-entrant).

    Returns False when another owner holds it.
    """
    client = redis_client()
    key = redis_keys.refresh_lease(account_id)
    if client.set(key, owner, nx=True, px=ttl_ms):
        return True
    return refresh_lease_renew(account_id=account_id, owner=owner, ttl_ms=ttl_ms)


def refresh_lease_renew(*, account_id: str, owner: str, ttl_ms: int) -> bool:
    """Extend the lease to ``ttl_ms`` from now if ``owner`` holds it; return whether it did."""
    script = redis_client().register_script(_RENEW_IF_OWNER)
    return bool(script(keys=[redis_keys.refresh_lease(account_id)], args=[owner, ttl_ms]))


def refresh_lease_release(*, account_id: str, owner: str) -> bool:
    """Release the lease if ``owner`` holds it (never someone else's); return whether it did."""
    script = redis_client().register_script(COMPARE_AND_DELETE)
    return bool(script(keys=[redis_keys.refresh_lease(account_id)], args=[owner]))


def refresh_leases_held(account_ids: Iterable[str]) -> set[str]:
    """The ids among ``account_ids`` whose lease is held right now (one MGET)."""
    ids = list(account_ids)
    if not ids:
        return set()
    values = redis_client().mget([redis_keys.refresh_lease(account_id) for account_id in ids])
    return {account_id for account_id, value in zip(ids, values, strict=True) if value is not None}
