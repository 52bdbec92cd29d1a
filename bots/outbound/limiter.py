"""Telegram's sending limits, held for every process of the bot at once (in Redis).

Telegram lets one bot send about 30 messages a second in all and about one a second into one
chat; beyond that it answers 429 with a ``retry_after``. A broadcast runs in a Celery worker,
relays in web processes, and there may be several of each, so the limits are kept in Redis, one
Lua call per decision, with one clock (Redis ``TIME``) for every process and host:

* **global** — at most ``per_second`` calls of the bot in any ``window`` (one second), and calls
  started no closer together than ``window / per_second`` (so they are spread over the second
  instead of leaving in a burst);
* **per chat** — one call into a chat, then nothing into it for ``chat_interval`` (one second);
* **blocked** — a ``retry_after`` Telegram answered to anybody holds back everybody for that
  long (``block``): a 429 slows the whole bot instead of inviting a burst of retries.

A permit is *held* while its call is in flight and *released* with the time the call ended. A
held permit counts as if its call ended ``lease`` after the grant (longer than any call can
take: the client's connect + read timeouts), a released one from when it really ended. Counting
ends rather than starts is what makes the bounds hold where Telegram measures them — on arrival:
a call arrives after its grant and before its end, so no ``per_second + 1`` calls can arrive
within one window, and two calls into one chat arrive at least ``chat_interval`` apart, however
late a process sends after its grant. A crashed holder's permit lapses after ``lease``.

Why not a library: limiters such as ``limits`` count a hit when it is taken, decide one bucket
per call, and know nothing of ``retry_after``; here the global bucket, the chat's bucket and
the block are decided together in one atomic step, with in-flight calls counted to their end.

Every key has a TTL (docs/redis-keys.md): after a FLUSHALL the counts restart from zero, so for
at most one window (or one ``retry_after``) the bot may send faster than this limiter allows —
Telegram's own 429 then slows it again. Nothing stays wedged.

What takes its permits today: the broadcast's send loop only (its sends and its control-message
edits, ``bots.pipeline.broadcast.sending``). Relays, cards and replies in the webhook, and the
purges' and wipes' deletions (paced by ``bots.pipeline.bulk``), do not yet, so the bot as a
whole may exceed these bounds while a broadcast runs; Telegram's 429 then slows the broadcast.

``priority`` names the traffic class of a call. Today every class shares the buckets first come,
first served; the one outbound scheduler of issue #24 (live relays first, card edits next,
purges and broadcasts last) orders the waiting calls by it.
"""

from __future__ import annotations

import contextlib
import enum
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from django_redis import get_redis_connection

from bots import redis_keys


class Priority(enum.IntEnum):
    """The traffic class of a call (lower goes first once issue #24 orders them)."""

    LIVE = 0  # relays between a user and the admins
    CARD = 1  # edits of the pinned cards and control messages
    BULK = 2  # purges and broadcasts


@dataclass(frozen=True)
class Limits:
    """The bounds one limiter keeps. Times in seconds."""

    per_second: int = 30  # calls of the bot in any ``window``
    chat_interval: float = 1.0  # after a call into a chat ended, nothing into it for this long
    window: float = 1.0
    # How long a held permit counts as in flight: above the Bot API client's connect + read
    # timeouts (5 + 15 s), so a live call always ends inside its lease.
    lease: float = 25.0

    @property
    def spacing(self) -> float:
        return self.window / self.per_second


# Telegram's documented guidance for bots: about 30 messages a second overall, one a second into
# one chat (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this).
TELEGRAM_LIMITS = Limits()

# The longest one sleep between two attempts: ``on_wait`` runs at least this often.
LONGEST_SLEEP = 0.5


@dataclass(frozen=True)
class Permit:
    id: str
    chat_id: int
    priority: Priority
    granted_at_ms: int  # Redis TIME


# Every script starts with the clock: ARGV[1] (epoch ms) when a test steps time by hand, else
# Redis TIME — one clock for every process and host.
_NOW = """
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: 1 global permits (ZSET permit → end ms), 2 next global start (ms), 3 the chat
# ("<free at ms>:<permit>"), 4 blocked until (ms).
# ARGV: 1 now ms or '' (Redis TIME), 2 per window, 3 window ms, 4 spacing ms,
# 5 chat interval ms, 6 lease ms, 7 permit id.
# Returns {1, now} when granted, {0, wait ms} otherwise.
_ACQUIRE = (
    _NOW
    + """
local per_window = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local spacing = tonumber(ARGV[4])
local chat_interval = tonumber(ARGV[5])
local lease = tonumber(ARGV[6])
local wait = 0
local blocked = tonumber(redis.call('GET', KEYS[4]) or '0')
if blocked > now then wait = blocked - now end
local chat = redis.call('GET', KEYS[3])
if chat then
  local free_at = tonumber(string.match(chat, '^(%d+)'))
  if free_at > now then wait = math.max(wait, free_at - now) end
end
local next_start = tonumber(redis.call('GET', KEYS[2]) or '0')
if next_start > now then wait = math.max(wait, next_start - now) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= per_window then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  wait = math.max(wait, tonumber(oldest[2]) + window - now)
end
if wait > 0 then
  return {0, wait}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[7])
redis.call('PEXPIRE', KEYS[1], window + lease)
if spacing > 0 then
  redis.call('SET', KEYS[2], now + spacing, 'PX', spacing)
end
local chat_free_at = now + lease + chat_interval
redis.call('SET', KEYS[3], chat_free_at .. ':' .. ARGV[7], 'PX', lease + chat_interval)
return {1, now}
"""
)

# KEYS: 1 global permits, 2 the chat. ARGV: 1 now ms or '', 2 permit id, 3 window ms,
# 4 chat interval ms. The permit's call ended now.
_RELEASE = (
    _NOW
    + """
local window = tonumber(ARGV[3])
local chat_interval = tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZADD', KEYS[1], 'XX', now, ARGV[2])
  if redis.call('PTTL', KEYS[1]) < window then
    redis.call('PEXPIRE', KEYS[1], window)
  end
end
local chat = redis.call('GET', KEYS[2])
if chat and string.match(chat, ':(.+)$') == ARGV[2] then
  redis.call('SET', KEYS[2], (now + chat_interval) .. ':' .. ARGV[2], 'PX', chat_interval)
end
return now
"""
)

# KEYS: 1 blocked until. ARGV: 1 now ms or '', 2 block ms. Never shortens a longer block.
_BLOCK = (
    _NOW
    + """
local until_ms = now + tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > current then
  redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[2]))
  return until_ms
end
return current
"""
)


def _milliseconds(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _now_argument(now_ms: int | None) -> str:
    return "" if now_ms is None else str(now_ms)


class OutboundLimiter:
    """The Telegram limits of one bot, shared through Redis by every process.

    ``now_ms`` arguments exist for tests that step time by hand; without them Redis ``TIME``
    is the clock.
    """

    def __init__(
        self,
        *,
        bot_id: int,
        limits: Limits = TELEGRAM_LIMITS,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bot_id = bot_id
        self.limits = limits
        self._sleep = sleep
        self._monotonic = monotonic
        self._redis = get_redis_connection("default")
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._release = self._redis.register_script(_RELEASE)
        self._block = self._redis.register_script(_BLOCK)

    def try_acquire(
        self, *, chat_id: int, priority: Priority = Priority.BULK, now_ms: int | None = None
    ) -> Permit | float:
        """A permit for one call into ``chat_id`` now, or the seconds to wait before asking
        again (somebody else may take the slot meanwhile: ask again, do not assume)."""
        permit_id = secrets.token_hex(8)
        granted, value = self._acquire(
            keys=[
                redis_keys.outbound_global(self.bot_id),
                redis_keys.outbound_next_start(self.bot_id),
                redis_keys.outbound_chat(self.bot_id, chat_id),
                redis_keys.outbound_blocked(self.bot_id),
            ],
            args=[
                _now_argument(now_ms),
                self.limits.per_second,
                _milliseconds(self.limits.window),
                _milliseconds(self.limits.spacing),
                _milliseconds(self.limits.chat_interval),
                _milliseconds(self.limits.lease),
                permit_id,
            ],
        )
        if granted == 1:
            return Permit(id=permit_id, chat_id=chat_id, priority=priority, granted_at_ms=value)
        return value / 1000

    def acquire(
        self,
        *,
        chat_id: int,
        priority: Priority = Priority.BULK,
        timeout: float | None = None,
        on_wait: Callable[[float], None] | None = None,
    ) -> Permit | None:
        """Wait for a permit into ``chat_id``; None when none came within ``timeout`` seconds
        (None: wait as long as it takes). ``on_wait(seconds)`` runs before every sleep (at most
        LONGEST_SLEEP apart) with the wait still ahead — a long job keeps its heartbeat there."""
        deadline = None if timeout is None else self._monotonic() + timeout
        while True:
            outcome = self.try_acquire(chat_id=chat_id, priority=priority)
            if isinstance(outcome, Permit):
                return outcome
            if deadline is not None and self._monotonic() + outcome > deadline:
                return None
            if on_wait is not None:
                on_wait(outcome)
            self._sleep(min(outcome, LONGEST_SLEEP))

    def release(self, permit: Permit, *, now_ms: int | None = None) -> None:
        """The permit's call ended (whatever its outcome)."""
        self._release(
            keys=[
                redis_keys.outbound_global(self.bot_id),
                redis_keys.outbound_chat(self.bot_id, permit.chat_id),
            ],
            args=[
                _now_argument(now_ms),
                permit.id,
                _milliseconds(self.limits.window),
                _milliseconds(self.limits.chat_interval),
            ],
        )

    @contextlib.contextmanager
    def sending(
        self, *, chat_id: int, priority: Priority = Priority.BULK, timeout: float | None = None
    ) -> Iterator[Permit | None]:
        """``with limiter.sending(chat_id=…) as permit:`` — make the call inside when ``permit``
        is not None; the permit is released when the block ends."""
        permit = self.acquire(chat_id=chat_id, priority=priority, timeout=timeout)
        try:
            yield permit
        finally:
            if permit is not None:
                self.release(permit)

    def block(self, *, seconds: float, now_ms: int | None = None) -> float:
        """Telegram asked the bot to wait ``seconds`` (a 429's retry_after): no permit for
        anybody before then (a longer block in force is kept). Returns the seconds the bot is
        blocked from now."""
        milliseconds = _milliseconds(seconds)
        if milliseconds == 0:
            return 0.0
        until_ms = self._block(
            keys=[redis_keys.outbound_blocked(self.bot_id)],
            args=[_now_argument(now_ms), milliseconds],
        )
        now = self._redis_now_ms() if now_ms is None else now_ms
        return max(0.0, (until_ms - now) / 1000)

    def _redis_now_ms(self) -> int:
        seconds, microseconds = self._redis.time()
        return seconds * 1000 + microseconds // 1000
