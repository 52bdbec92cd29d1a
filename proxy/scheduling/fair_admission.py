"""Fair sharing when the pool is short (issue 25 item 2, peers.md B.4): when every account is
at its concurrency cap, the requests waiting for a slot are admitted round-robin across client
keys, not first-come, so one heavy key cannot starve the others.

A request that has to wait joins a registry in Redis shared by every process
(``proxy.redis_keys.fair_*``): its key in the rotation of keys with waiters, itself in its
key's first-come queue, and a record of its candidate accounts and last poll. Each poll is one
Lua call that registers (or refreshes) the waiter and takes a free slot only when the waiter's
turn has come for it: walking the keys in rotation order, the first waiter, in its key's queue
order, that may use the freed account. A key served moves to the end of the rotation, so with
keys A and B waiting, freed slots go A, B, A, B, ... whatever their numbers of waiters.

A freed slot waits for the poll of the waiter whose turn it is, so the first ``FRONT_RANKS``
waiters of each key poll every ``FRONT_PAUSE_SECONDS``; the rest back off as before.

Waiters that died (a killed worker) are pruned by their last poll's age
(``WAITER_STALE_MS``); a waiter that leaves (timed out, client gone) removes itself. Every key
of the registry expires ``REGISTRY_TTL_MS`` after the last poll, and after a FLUSHALL each
waiter re-registers on its next poll with the arrival number it holds: nothing stays wedged.

The fast path is untouched: a request that finds a free slot at once takes it in the one
order-and-acquire call (``scheduler``), which only checks, inside that call, that no one is
waiting — if someone is, the newcomer waits its turn too instead of overtaking them.

The scripts read the queues and records of other keys, derived from the prefixes passed in:
the project runs on one Redis server, not a cluster.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from redis.commands.core import AsyncScript

from common import clock
from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.accounts import AccountView
from proxy.domain.slots import SchedulerSettings, Slot
from proxy.loop_resources import async_redis

logger = logging.getLogger(__name__)

# A waiter polls at least every 0.2 s (``scheduler.WaitPolicy``); one silent for this long is
# taken for dead. Generous, because pruning a live waiter only costs it its place, while a dead
# one keeps a freed slot unused for at most this long.
WAITER_STALE_MS = 10_000
# Every registry key outlives the last poll by this much, then Redis drops it.
REGISTRY_TTL_MS = 2 * WAITER_STALE_MS
# Requests without a client key (none reach /v1 today) share one place in the rotation.
KEYLESS = "-"
# Waiters read per round trip inside the script while looking for whose turn it is.
_BATCH = 16
# The first two waiters of each key poll this often: the turn comes to them next, and a freed
# slot stays unused until its waiter polls. The others back off (``scheduler.WaitPolicy``).
FRONT_RANKS = 2
FRONT_PAUSE_SECONDS = 0.02

# KEYS: 1 rotation, 2 own queue, 3 own record, 4 sequence, 5.. slot keys of the candidates
# ARGV: 1 now ms, 2 slots stale before ms, 3 max slots, 4 slot id, 5 slot ttl ms, 6 waiter id,
#       7 client key id, 8 arrival number ('' = none yet), 9 waiters stale before ms,
#       10 registry ttl ms, 11 queue key prefix, 12 record key prefix, 13 '1' when the
#       candidates changed since the last poll, 14.. candidate ids
# Returns {position of the account taken (1-based, 0 = none), latest other start or -1,
#          the waiter's arrival number, its rank in its key's queue (-1 once served)}.
_TAKE_TURN = lua_script("proxy", "fair_admission_take_turn", batch_last=str(_BATCH - 1))

# KEYS: rotation, own queue, own record; ARGV: client key id, waiter id
_LEAVE = lua_script("proxy", "fair_admission_leave")

# No client of their own: each call passes one (redis-py's stubs want one here all the same).
_SCRIPTS = {
    "take_turn": AsyncScript(None, _TAKE_TURN.encode()),  # type: ignore[arg-type]
    "leave": AsyncScript(None, _LEAVE.encode()),  # type: ignore[arg-type]
}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Waiter:
    """One request waiting for a slot on behalf of its client key. ``take_turn`` polls (one
    Redis call); ``leave`` gives up its place (no call when it holds none)."""

    def __init__(self, client_key_id: str | None) -> None:
        self.client_key_id = client_key_id or KEYLESS
        self.waiter_id = os.urandom(12).hex()
        self.arrival: int | None = None
        # Its place in its key's queue after the last poll (None: not polled yet, or served).
        self.rank: int | None = None
        self._sent_candidates: tuple[str, ...] = ()
        # Whether the registry may hold this waiter: from its first poll (even one that failed
        # half-way) until a poll takes a slot, which removes it.
        self.registered = False

    def _own_keys(self) -> list[str]:
        return [
            redis_keys.fair_turns(),
            redis_keys.fair_queue(self.client_key_id),
            redis_keys.fair_waiter(self.waiter_id),
        ]

    async def take_turn(
        self,
        accounts: Sequence[AccountView],
        scheduler: SchedulerSettings,
        *,
        now_ms: int | None = None,
    ) -> Slot | None:
        """A slot on the first of ``accounts`` (in order) that has one free and whose turn has
        come for this waiter; None when there is none (the waiter stays registered). One Redis
        call. ``now_ms`` (tests) replaces the clock."""
        if not accounts:
            return None
        now = clock.now_ms() if now_ms is None else now_ms
        slot_id = os.urandom(12).hex()
        candidates = tuple(account.id for account in accounts)
        keys = [
            *self._own_keys(),
            redis_keys.fair_sequence(),
            *(redis_keys.account_slots(account.id) for account in accounts),
        ]
        args = [
            now,
            now - scheduler.slot_ttl_ms,
            scheduler.max_concurrent_per_account,
            slot_id,
            scheduler.slot_ttl_ms,
            self.waiter_id,
            self.client_key_id,
            "" if self.arrival is None else self.arrival,
            now - WAITER_STALE_MS,
            REGISTRY_TTL_MS,
            redis_keys.fair_queue(""),
            redis_keys.fair_waiter(""),
            "1" if candidates != self._sent_candidates else "0",
            *candidates,
        ]
        self.registered = True
        redis = await async_redis.get()
        position, latest, arrival, rank = await _SCRIPTS["take_turn"](
            keys=keys, args=args, client=redis
        )
        self.arrival = int(arrival)
        self._sent_candidates = candidates
        position = int(position)
        if not position:
            self.rank = int(rank)
            return None
        self.registered = False
        self.rank = None
        self._sent_candidates = ()
        previous = int(float(_text(latest)))
        return Slot(accounts[position - 1], slot_id, previous if previous >= 0 else None)

    def pause_seconds(self, backoff: float) -> float:
        """How long to wait before the next poll: short near the front of its key's queue,
        else ``backoff``."""
        if self.rank is not None and 0 <= self.rank < FRONT_RANKS:
            return min(backoff, FRONT_PAUSE_SECONDS)
        return backoff

    async def leave(self) -> None:
        """Give up the place in the registry. Never raises: a waiter that could not leave is
        pruned once its last poll is ``WAITER_STALE_MS`` old."""
        if not self.registered:
            return
        self.registered = False
        try:
            redis = await async_redis.get()
            await _SCRIPTS["leave"](
                keys=self._own_keys(), args=[self.client_key_id, self.waiter_id], client=redis
            )
        except Exception:
            logger.warning("leaving the fair-admission registry failed; it prunes the waiter")
