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
import time
from collections.abc import Sequence

from redis.commands.core import AsyncScript

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
_TAKE_TURN = (
    """
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[10])
local waiter, client_key = ARGV[6], ARGV[7]
local stale_before = tonumber(ARGV[9])
local count = #KEYS - 4

local function next_number()
  local value = redis.call('INCR', KEYS[4])
  redis.call('PEXPIRE', KEYS[4], ttl)
  return value
end

-- Join, or stay: a waiter lost to a FLUSHALL or a prune joins again at its own number.
local arrival = tonumber(ARGV[8])
if arrival == nil then
  arrival = next_number()
elseif tonumber(redis.call('GET', KEYS[4]) or '0') < arrival then
  redis.call('SET', KEYS[4], arrival, 'PX', ttl)
else
  redis.call('PEXPIRE', KEYS[4], ttl)
end
if ARGV[13] == '1' or redis.call('EXISTS', KEYS[3]) == 0 then
  local ids = {}
  for i = 1, count do ids[i] = ARGV[13 + i] end
  redis.call('HSET', KEYS[3], 'key', client_key, 'accounts', ',' .. table.concat(ids, ',') .. ',')
end
redis.call('HSET', KEYS[3], 'seen', now)
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('ZADD', KEYS[2], 'NX', arrival, waiter)
redis.call('PEXPIRE', KEYS[2], ttl)
if not redis.call('ZSCORE', KEYS[1], client_key) then
  redis.call('ZADD', KEYS[1], next_number(), client_key)
end
redis.call('PEXPIRE', KEYS[1], ttl)

-- Whose turn it is for a slot on one account: the keys in rotation order, in each the first
-- live waiter that may use the account. Waiters silent since stale_before are pruned.
local function turn_for(account)
  local needle = ',' .. account .. ','
  for _, turn_key in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local queue = ARGV[11] .. turn_key
    local start = 0
    while true do
      local batch = redis.call('ZRANGE', queue, start, start + """
    + str(_BATCH - 1)
    + """)
      if #batch == 0 then break end
      local pruned = 0
      for _, candidate in ipairs(batch) do
        local record = redis.call('HMGET', ARGV[12] .. candidate, 'seen', 'accounts')
        if not record[1] or tonumber(record[1]) < stale_before then
          redis.call('ZREM', queue, candidate)
          redis.call('DEL', ARGV[12] .. candidate)
          pruned = pruned + 1
        elseif string.find(record[2], needle, 1, true) then
          return candidate
        end
      end
      start = start + #batch - pruned
    end
    if redis.call('EXISTS', queue) == 0 then redis.call('ZREM', KEYS[1], turn_key) end
  end
  return nil
end

for i = 1, count do
  local slots = KEYS[4 + i]
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', '(' .. ARGV[2])
  if redis.call('ZCARD', slots) < tonumber(ARGV[3]) and turn_for(ARGV[13 + i]) == waiter then
    local latest = redis.call('ZREVRANGE', slots, 0, 0, 'WITHSCORES')
    redis.call('ZADD', slots, now, ARGV[4])
    redis.call('PEXPIRE', slots, tonumber(ARGV[5]))
    -- Served: out of the registry, and its key to the end of the rotation.
    redis.call('DEL', KEYS[3])
    redis.call('ZREM', KEYS[2], waiter)
    if redis.call('EXISTS', KEYS[2]) == 1 then
      redis.call('ZADD', KEYS[1], next_number(), client_key)
    else
      redis.call('ZREM', KEYS[1], client_key)
    end
    if #latest > 0 then return {i, latest[2], arrival, -1} end
    return {i, '-1', arrival, -1}
  end
end
return {0, '-1', arrival, redis.call('ZRANK', KEYS[2], waiter) or -1}
"""
)

# KEYS: rotation, own queue, own record; ARGV: client key id, waiter id
_LEAVE = """
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1
"""

_SCRIPTS = {
    "take_turn": AsyncScript(None, _TAKE_TURN.encode()),
    "leave": AsyncScript(None, _LEAVE.encode()),
}


def _now_ms() -> int:
    return int(time.time() * 1000)


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
        now = _now_ms() if now_ms is None else now_ms
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
