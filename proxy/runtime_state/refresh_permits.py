"""The cross-process cap on token calls (``runtime_settings.refresh_concurrency``, spec §4.1).

A counting semaphore in Redis: permits are members of one ZSET scored by when they were taken.
Taking one is a single Lua call (drop permits older than the TTL, a crashed holder's; take one
if fewer than the limit are held); giving it back is one ZREM. After a FLUSHALL the count
restarts from zero: for at most one token call the cap may be exceeded, nothing stays wedged.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from common import clock
from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.runtime_state import redis_client

# Longer than a token call can take (connect + read timeouts), so only dead holders expire.
PERMIT_TTL_MS = 120_000

# KEYS[1] permits ZSET; ARGV: now_ms, limit, permit id, ttl_ms
_TAKE = lua_script("proxy", "refresh_permit_take")


class PermitTimeout(Exception):
    """No permit became free within the wait."""


def refresh_permit_take(*, permit_id: str, limit: int) -> bool:
    """Take a permit if fewer than ``limit`` are held; return whether it was taken."""
    script = redis_client().register_script(_TAKE)
    now_ms = clock.now_ms()
    return bool(
        script(keys=[redis_keys.refresh_permits()], args=[now_ms, limit, permit_id, PERMIT_TTL_MS])
    )


def refresh_permit_give_back(*, permit_id: str) -> None:
    redis_client().zrem(redis_keys.refresh_permits(), permit_id)


@contextlib.contextmanager
def refresh_permit(
    *,
    limit: Callable[[], int],
    wait_seconds: float,
    sleep: Callable[[float], None] = clock.sleep,
) -> Iterator[None]:
    """Hold one permit for the block, waiting up to ``wait_seconds`` for one to free up.

    ``limit`` is read before every try, so a changed ``refresh_concurrency`` applies at once.
    Raises PermitTimeout when none freed up in time.
    """
    permit_id = os.urandom(12).hex()
    deadline = clock.monotonic() + wait_seconds
    pause = 0.02
    while not refresh_permit_take(permit_id=permit_id, limit=limit()):
        if clock.monotonic() >= deadline:
            raise PermitTimeout
        sleep(pause)
        pause = min(pause * 2, 0.25)
    try:
        yield
    finally:
        refresh_permit_give_back(permit_id=permit_id)
