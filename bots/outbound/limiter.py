"""Telegram's sending limits, held for every process of the bot at once (in Redis).

Every Bot API call that sends, edits or deletes goes through this one limiter: the webhook's
relays and replies (``bots.outbound.paced``), card edits, purges and wipes, and the broadcast's
send loop. Telegram lets one bot send about 30 messages a second in all, about one a second
into one private chat and about 20 a minute into one group (creating a topic counts); beyond
that it answers 429 with a ``retry_after``. A broadcast runs in a Celery worker, relays in web
processes, and there may be several of each, so the limits are kept in Redis, one Lua call per
decision, with one clock (Redis ``TIME``) for every process and host. The buckets:

* **global** — at most ``per_second`` calls of the bot in any ``window`` (one second), and calls
  started no closer together than ``window / per_second`` (so they are spread over the second
  instead of leaving in a burst);
* **per chat** — one message into a chat, then nothing into it for ``chat_interval`` (one
  second);
* **per group** (a negative chat id: the support group) — besides, at most ``group_per_window``
  messages in any ``group_window`` (20 a minute);
* **blocked** — a ``retry_after`` Telegram answered blocks that bucket for everybody for that
  long (``block``): the group's bucket for a 429 in the group, the global one otherwise (into a
  private chat the bot keeps one a second itself, so a 429 there is the bot's overall limit).

Deletions, pins and topic close/reopen/delete take no bucket (``counted=False``): Telegram's
numbers are for messages, and bulk deletions keep their own pace (``bots.pipeline.bulk``). They
still wait out every block in force and yield to waiters of a higher priority.

A permit is *held* while its call is in flight and *released* with the time the call ended. A
held permit counts as if its call ended ``lease`` after the grant (longer than any call can
take: the client's connect + read timeouts), a released one from when it really ended. Counting
ends rather than starts is what makes the bounds hold where Telegram measures them — on arrival:
a call arrives after its grant and before its end, so no ``per_second + 1`` calls can arrive
within one window, and two calls into one chat arrive at least ``chat_interval`` apart, however
late a process sends after its grant. A crashed holder's permit lapses after ``lease``.

**Priorities.** ``Priority`` orders the waiting calls: live relays and admin replies first,
card edits next, purge deletions and broadcast sends last. A refused caller registers as a
waiter of the bucket that refused it (the chat's, or the global one when only that one did),
for ``WAITER_SECONDS`` and again on every retry; a bucket with a waiter of a higher priority
grants nothing to a lower one. So a broadcast never takes the slot a relay is waiting for,
while it may still use the global capacity a relay waiting on the group's bucket cannot.

Why not a library: limiters such as ``limits`` count a hit when it is taken, decide one bucket
per call, and know nothing of ``retry_after`` or priorities; here the global bucket, the chat's
bucket, the blocks and the waiters are decided together in one atomic step, with in-flight
calls counted to their end.

Every key has a TTL (docs/redis-keys.md): after a FLUSHALL the counts restart from zero, so for
at most one window (or one ``retry_after``) the bot may send faster than this limiter allows —
Telegram's own 429 then slows it again. Nothing stays wedged.
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
from common import clock
from common.redis_scripts import lua_script


class Priority(enum.IntEnum):
    """The traffic class of a call: a lower value goes first."""

    LIVE = 0  # relays between a user and the admins, command replies, topic creation
    CARD = 1  # edits of the pinned cards and control messages
    BULK = 2  # purges and broadcasts


@dataclass(frozen=True)
class Limits:
    """The bounds one limiter keeps. Times in seconds; 0 turns a bound off."""

    per_second: int = 30  # calls of the bot in any ``window``
    chat_interval: float = 1.0  # after a message into a chat ended, none into it for this long
    window: float = 1.0
    # How long a held permit counts as in flight: above the Bot API client's connect + read
    # timeouts (5 + 15 s), so a live call always ends inside its lease.
    lease: float = 25.0
    group_per_window: int = 20  # messages into one group in any ``group_window``
    group_window: float = 60.0

    @property
    def spacing(self) -> float:
        return self.window / self.per_second if self.per_second else 0.0


# Telegram's documented guidance for bots: about 30 messages a second overall, one a second into
# one chat (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this), and
# about 20 a minute into one group, topic creation included (Telegram staff, tdlib/td#2592).
TELEGRAM_LIMITS = Limits()

# The longest one sleep between two attempts: ``on_wait`` runs at least this often.
LONGEST_SLEEP = 0.5
# How often a caller asks again while the call it waits for is still in flight.
IN_FLIGHT_POLL = 0.02
# How long a refused caller stays registered as a waiter without asking again (it asks again
# at least every LONGEST_SLEEP): a caller that died stops holding back lower priorities soon.
WAITER_SECONDS = 1.5
# Waiters' scores: priority * this + expiry (epoch ms), so one ZSET holds every class in order.
_PRIORITY_STRIDE = 10**13


@dataclass(frozen=True)
class Permit:
    id: str
    chat_id: int
    priority: Priority
    granted_at_ms: int  # Redis TIME
    counted: bool = True  # a message: it took the buckets (False: it only waited its turn)
    weight: int = 1  # messages it counts for in the windows (an album: its items)


class NoPermit(Exception):
    """No permit came within the caller's budget (``acquire`` returned None)."""


# Every script starts with the clock: ARGV[1] (epoch ms) when a test steps time by hand, else
# Redis TIME — one clock for every process and host.
_NOW = lua_script("bots", "outbound_now")

# KEYS: 1 global permits (ZSET permit → end ms), 2 next global start (ms), 3 global blocked
# until (ms), 4 global waiters (ZSET waiter → priority * stride + expiry ms), 5 the chat
# ("<free at ms>:<permit>"), 6 the group's permits (ZSET; groups only), 7 the chat's blocked
# until, 8 the chat's waiters.
# ARGV: 1 now ms or '', 2 per window, 3 window ms, 4 spacing ms, 5 chat interval ms (0: none),
# 6 group per window (0: none), 7 group window ms, 8 lease ms, 9 permit id, 10 priority,
# 11 waiter ms, 12 stride, 13 '1' when the call takes the chat's bucket, 14 weight (messages
# the call sends: an album's items; capped at the windows' sizes).
# Returns {1, now} when granted, {0, wait ms, in flight} otherwise — in flight 1 when the wait
# is for a call still under way (it may end any moment: ask again soon), 0 when it is certain.
_ACQUIRE = _NOW + lua_script("bots", "outbound_acquire")

# KEYS: 1 global permits, 2 the chat, 3 the group's permits. ARGV: 1 now ms or '',
# 2 permit id, 3 window ms, 4 chat interval ms, 5 group window ms, 6 weight. The permit's call
# ended now.
_RELEASE = _NOW + lua_script("bots", "outbound_release")

# KEYS: 1 blocked until. ARGV: 1 now ms or '', 2 block ms. Never shortens a longer block.
_BLOCK = _NOW + lua_script("bots", "outbound_block")


def _milliseconds(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def _now_argument(now_ms: int | None) -> str:
    return "" if now_ms is None else str(now_ms)


def is_group(chat_id: int) -> bool:
    """Groups and supergroups have negative ids; users (private chats) positive ones."""
    return chat_id < 0


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
        monotonic: Callable[[], float] = clock.monotonic,
    ) -> None:
        self.bot_id = bot_id
        self.limits = limits
        self._sleep = sleep
        self._monotonic = monotonic
        self.last_refusal_wait = 0.0  # seconds: see ``acquire``
        self._redis = get_redis_connection("default")
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._release = self._redis.register_script(_RELEASE)
        self._block = self._redis.register_script(_BLOCK)

    def _chat_keys(self, chat_id: int) -> tuple[str, str]:
        """(the chat's interval key, the group's permits — used only for a group)."""
        return (
            redis_keys.outbound_chat(self.bot_id, chat_id),
            redis_keys.outbound_group(self.bot_id, chat_id),
        )

    def try_acquire(
        self,
        *,
        chat_id: int,
        priority: Priority = Priority.BULK,
        now_ms: int | None = None,
        counted: bool = True,
        permit_id: str | None = None,
        weight: int = 1,
    ) -> Permit | float:
        """A permit for one call into ``chat_id`` now, or the seconds to wait before asking
        again (somebody else may take the slot meanwhile: ask again, do not assume).

        ``counted``: the call is a message (send, edit, topic creation) and takes the buckets;
        False for deletions, pins and topic state (blocks and priorities only).
        ``permit_id``: the same id on every retry of one caller (its place as a waiter).
        ``weight``: how many messages the call sends (an album's items), at most a window."""
        outcome, _ = self._try(
            chat_id=chat_id,
            priority=priority,
            now_ms=now_ms,
            counted=counted,
            permit_id=permit_id or secrets.token_hex(8),
            weight=weight,
        )
        return outcome

    def poll(
        self,
        *,
        chat_id: int,
        priority: Priority,
        permit_id: str,
        counted: bool = True,
        weight: int = 1,
    ) -> tuple[Permit | float, bool]:
        """One ask of a caller that waits in its own loop (the broadcast's): a permit, or the
        seconds to wait and whether that wait is for a call still in flight (ask again within
        IN_FLIGHT_POLL). The same ``permit_id`` on every ask keeps its place as a waiter;
        ``withdraw`` it when giving up."""
        return self._try(
            chat_id=chat_id,
            priority=priority,
            now_ms=None,
            counted=counted,
            permit_id=permit_id,
            weight=weight,
        )

    def _try(
        self,
        *,
        chat_id: int,
        priority: Priority,
        now_ms: int | None,
        counted: bool,
        permit_id: str,
        weight: int = 1,
    ) -> tuple[Permit | float, bool]:
        """``try_acquire``, and whether a refusal's wait is for a call still in flight."""
        group = is_group(chat_id)
        largest = self.limits.per_second
        if group and self.limits.group_per_window:
            largest = min(largest, self.limits.group_per_window)
        weight = max(1, min(weight, largest))
        chat_key, group_key = self._chat_keys(chat_id)
        granted, value, *in_flight = self._acquire(
            keys=[
                redis_keys.outbound_global(self.bot_id),
                redis_keys.outbound_next_start(self.bot_id),
                redis_keys.outbound_blocked(self.bot_id),
                redis_keys.outbound_waiters(self.bot_id),
                chat_key,
                group_key,
                redis_keys.outbound_chat_blocked(self.bot_id, chat_id),
                redis_keys.outbound_chat_waiters(self.bot_id, chat_id),
            ],
            args=[
                _now_argument(now_ms),
                self.limits.per_second,
                _milliseconds(self.limits.window),
                _milliseconds(self.limits.spacing),
                _milliseconds(self.limits.chat_interval),
                self.limits.group_per_window if group else 0,
                _milliseconds(self.limits.group_window),
                _milliseconds(self.limits.lease),
                permit_id,
                int(priority),
                _milliseconds(WAITER_SECONDS),
                _PRIORITY_STRIDE,
                "1" if counted else "0",
                weight,
            ],
        )
        if granted == 1:
            permit = Permit(
                id=permit_id,
                chat_id=chat_id,
                priority=priority,
                granted_at_ms=value,
                counted=counted,
                weight=weight,
            )
            return permit, False
        return value / 1000, in_flight == [1]

    def acquire(
        self,
        *,
        chat_id: int,
        priority: Priority = Priority.BULK,
        timeout: float | None = None,
        on_wait: Callable[[float], None] | None = None,
        counted: bool = True,
        weight: int = 1,
    ) -> Permit | None:
        """Wait for a permit into ``chat_id``; None when none came within ``timeout`` seconds
        (None: wait as long as it takes) — then ``last_refusal_wait`` is the wait the limiter
        saw ahead (a hint: others may take the slot first). ``on_wait(seconds)`` runs before
        every sleep (at most LONGEST_SLEEP apart) with the wait still ahead — a long job keeps
        its heartbeat there."""
        deadline = None if timeout is None else self._monotonic() + timeout
        permit_id = secrets.token_hex(8)
        while True:
            outcome, in_flight = self._try(
                chat_id=chat_id,
                priority=priority,
                now_ms=None,
                counted=counted,
                permit_id=permit_id,
                weight=weight,
            )
            if isinstance(outcome, Permit):
                return outcome
            # A wait for a call in flight is its lease: the call may end any moment, so poll.
            wait = min(outcome, IN_FLIGHT_POLL) if in_flight else outcome
            if deadline is not None and self._monotonic() + wait > deadline:
                self.withdraw(chat_id=chat_id, permit_id=permit_id)
                self.last_refusal_wait = wait  # for a call in flight: a poll, not its lease
                return None
            if on_wait is not None:
                on_wait(outcome)
            self._sleep(min(wait, LONGEST_SLEEP))

    def withdraw(self, *, chat_id: int, permit_id: str) -> None:
        """A waiter gives up: it no longer holds back lower priorities."""
        pipeline = self._redis.pipeline(transaction=False)
        pipeline.zrem(redis_keys.outbound_waiters(self.bot_id), permit_id)
        pipeline.zrem(redis_keys.outbound_chat_waiters(self.bot_id, chat_id), permit_id)
        pipeline.execute()

    def release(self, permit: Permit, *, now_ms: int | None = None) -> None:
        """The permit's call ended (whatever its outcome)."""
        if not permit.counted:
            return  # it took no bucket
        chat_key, group_key = self._chat_keys(permit.chat_id)
        self._release(
            keys=[redis_keys.outbound_global(self.bot_id), chat_key, group_key],
            args=[
                _now_argument(now_ms),
                permit.id,
                _milliseconds(self.limits.window),
                _milliseconds(self.limits.chat_interval),
                _milliseconds(self.limits.group_window),
                permit.weight,
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

    def block(
        self, *, seconds: float, now_ms: int | None = None, chat_id: int | None = None
    ) -> float:
        """Telegram asked the bot to wait ``seconds`` (a 429's retry_after): no permit for
        anybody before then (a longer block in force is kept) — in the whole bot, or with
        ``chat_id`` only for messages into that chat. Returns the seconds blocked from now."""
        milliseconds = _milliseconds(seconds)
        if milliseconds == 0:
            return 0.0
        key = (
            redis_keys.outbound_blocked(self.bot_id)
            if chat_id is None
            else redis_keys.outbound_chat_blocked(self.bot_id, chat_id)
        )
        until_ms = self._block(keys=[key], args=[_now_argument(now_ms), milliseconds])
        now = self._redis_now_ms() if now_ms is None else now_ms
        return max(0.0, (until_ms - now) / 1000)

    def learn_retry_after(
        self, *, chat_id: int, seconds: float, now_ms: int | None = None
    ) -> float:
        """A 429 answered to a call into ``chat_id``: block the bucket it names (the group's
        for a group, the bot's for a private chat — see the module docstring)."""
        return self.block(
            seconds=seconds, now_ms=now_ms, chat_id=chat_id if is_group(chat_id) else None
        )

    def _redis_now_ms(self) -> int:
        seconds, microseconds = self._redis.time()
        return seconds * 1000 + microseconds // 1000
