"""Choosing accounts (spec §3.3–§3.5), with the shared state in Redis so limits hold across
uvicorn workers and hosts (the original kept it in one process).

Per request: one Lua call advances the shared rotation cursor, finishes the ordering (the smart
strategy's load factor comes from live slot counts), and takes a concurrency slot on the first
account that has one free; one Lua call releases it. Slots are ZSET members scored by their
start time: a slot older than the TTL (a crashed worker's) is reclaimed on the next acquire, and
every running call — stream, non-stream read, compact — refreshes its slot's score
(``proxy.scheduling.keep_alive``) so long responses keep counting.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.conf import settings
from redis.commands.core import AsyncScript

from common import clock
from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.accounts import AccountView
from proxy.domain.slots import SchedulerSettings, Slot
from proxy.ledger import affinity
from proxy.loop_resources import async_redis
from proxy.runtime_state.script_calls import ScriptCall
from proxy.scheduling.ranking import Ranking

logger = logging.getLogger(__name__)

CURSOR_TTL_SECONDS = 7 * 24 * 3600

# KEYS[1] cursor hash, KEYS[2..n+1] slot keys of the candidates (same order as the ARGV pairs),
#   KEYS[n+2] (with a conversation lookup) the conversation's affinity index, and last the
#   fair-admission rotation (when it exists, requests are waiting: take no slot)
# ARGV: strategy, now_ms, stale_before_ms, max_slots, slot_id, slot_ttl_ms, load_weight,
#       rotate (1/0), cursor_ttl_s, affinity record key prefix ('' = no lookup), variant hash,
#       scan size, client key id, then n pairs (account id, base score)
# With a lookup, the account of the conversation's newest affinity record of the same variant
# and of the same client key (spec §5.2, issue 34; a record of another key or of none is
# passed over; dangling index members removed on the way) goes first when it is a candidate:
# the preference costs no round trip of its own. Returns {acquired id or '', latest other
# start or '-1', preferred account id or '', the order...}.
_ORDER_AND_ACQUIRE = lua_script("proxy", "scheduler_order_and_acquire")

# KEYS: slot keys of the candidates in order; ARGV: now_ms, stale_before_ms, max_slots, slot_id,
# slot_ttl_ms. Takes a slot on the first account with one free: {position (1-based), latest
# other start or -1}, or {0, -1} when all are full.
_ACQUIRE_FIRST_FREE = lua_script("proxy", "scheduler_acquire_first_free")

# KEYS[1] slot key, KEYS[2..3] Cloudflare counters; ARGV: slot_id, reset_cloudflare (1/0)
_RELEASE = lua_script("proxy", "scheduler_release")


# ----------------------------------------------------------------------------- Redis calls


# Built once: each script's SHA is computed here, and every call is one EVALSHA (a server that
# does not know the script yet gets it loaded once).
# No client of their own: each call passes one (redis-py's stubs want one here all the same).
_SCRIPTS = {
    name: AsyncScript(None, source.encode())  # type: ignore[arg-type]
    for name, source in (
        ("order", _ORDER_AND_ACQUIRE),
        ("first_free", _ACQUIRE_FIRST_FREE),
        ("release", _RELEASE),
    )
}


async def _run_script(name: str, keys: list[str], args: list) -> list:
    redis = await async_redis.get()
    return await _SCRIPTS[name](keys=keys, args=args, client=redis)


def _decode(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class ConversationLookup:
    """The conversation whose newest affinity record of ``variant_hash`` and of
    ``client_key_id`` names the account to prefer (spec §5.2), looked up inside the
    order-and-acquire script. (None: no record is anyone's preference.)"""

    conversation_id: str
    variant_hash: str
    client_key_id: str | None = None


# How many of a conversation's newest records the preference looks at for a matching variant.
PREFERENCE_SCAN = 16


async def order_and_acquire(
    ranking: Ranking,
    scheduler: SchedulerSettings,
    *,
    conversation: ConversationLookup | None = None,
) -> tuple[list[AccountView], Slot | None, str | None]:
    """Finish the order and take a slot on the first account with one free; with
    ``conversation``, the account of its affinity record (when a candidate) goes first.

    Returns the full candidate order, the slot (None when every account is busy, or when
    other requests are waiting for a slot: they go first) and the account the conversation's
    record named (None when none did).
    """
    accounts = ranking.accounts
    if not accounts:
        return [], None, None
    now = clock.now_ms()
    slot_id = os.urandom(12).hex()
    keys = [redis_keys.scheduler_cursor()] + [
        redis_keys.account_slots(account.id) for account in accounts
    ]
    if conversation is not None:
        keys.append(redis_keys.affinity_conversation(conversation.conversation_id))
    # Requests waiting for a slot are admitted in turn (fair_admission): a newcomer does not
    # overtake them, it waits too. Checked inside this call, so the fast path costs no more.
    keys.append(redis_keys.fair_turns())
    args = [
        scheduler.strategy,
        now,
        now - scheduler.slot_ttl_ms,
        scheduler.max_concurrent_per_account,
        slot_id,
        scheduler.slot_ttl_ms,
        repr(ranking.load_weight),
        "1" if ranking.rotate_ties else "0",
        CURSOR_TTL_SECONDS,
        redis_keys.affinity_response("") if conversation is not None else "",
        conversation.variant_hash if conversation is not None else "",
        PREFERENCE_SCAN,
        (conversation.client_key_id or "") if conversation is not None else "",
    ]
    for account, score in zip(accounts, ranking.base_scores, strict=True):
        args += [account.id, repr(score)]
    result = await _run_script("order", keys, args)
    acquired_id, previous = _decode(result[0]), int(float(_decode(result[1])))
    preferred = _decode(result[2]) or None
    by_id = {account.id: account for account in accounts}
    order = [by_id[_decode(account_id)] for account_id in result[3:]]
    if not acquired_id:
        return order, None, preferred
    slot = Slot(by_id[acquired_id], slot_id, previous if previous >= 0 else None)
    return order, slot, preferred


async def acquire_first_free(
    accounts: Sequence[AccountView], scheduler: SchedulerSettings
) -> Slot | None:
    """A slot on the first of ``accounts`` (in order) below its concurrency limit: one Redis
    call. None when every one of them is full."""
    if not accounts:
        return None
    now = clock.now_ms()
    slot_id = os.urandom(12).hex()
    position, previous = await _run_script(
        "first_free",
        [redis_keys.account_slots(account.id) for account in accounts],
        [
            now,
            now - scheduler.slot_ttl_ms,
            scheduler.max_concurrent_per_account,
            slot_id,
            scheduler.slot_ttl_ms,
        ],
    )
    if not int(position):
        return None
    previous_ms = int(float(_decode(previous)))
    return Slot(accounts[int(position) - 1], slot_id, previous_ms if previous_ms >= 0 else None)


async def acquire(account: AccountView, scheduler: SchedulerSettings) -> Slot | None:
    """Take a slot on ``account``; None when it is at its concurrency limit."""
    return await acquire_first_free([account], scheduler)


def release_later(slot: Slot, *, succeeded: bool = False) -> None:
    """Give the slot back with the next batch of after-response writes (one round trip for
    many requests under load; at once when the writer is idle): for a slot whose request has
    ended. Never raises: a slot that could not be released is reclaimed by its TTL."""
    affinity.submit_call(
        ScriptCall(
            _SCRIPTS["release"], *_release_keys_and_args(slot, succeeded), what="slot release"
        )
    )


def _release_keys_and_args(slot: Slot, succeeded: bool) -> tuple[list[str], list]:
    return (
        [
            redis_keys.account_slots(slot.account.id),
            redis_keys.cloudflare_challenges(slot.account.id),
            redis_keys.cloudflare_path_blocks(slot.account.id),
        ],
        [slot.slot_id, "1" if succeeded else "0"],
    )


async def release(slot: Slot, *, succeeded: bool = False) -> None:
    """Give the slot back (one round trip); a success also clears the Cloudflare counters.

    Never raises: an answer already sent must not fail because Redis hiccuped; a slot that
    could not be released is reclaimed by its TTL.
    """
    try:
        await _release(slot, succeeded=succeeded)
    except Exception:
        logger.warning("slot release failed; the slot TTL will reclaim it", exc_info=True)


async def _release(slot: Slot, *, succeeded: bool) -> None:
    await _run_script("release", *_release_keys_and_args(slot, succeeded))


def queue_heartbeat(pipeline, slot: Slot, *, at_ms: int, ttl_ms: int) -> None:
    """Add to ``pipeline`` the commands that mark a running call's slot alive: its score is its
    last sign of life, and the key's TTL is pushed out too (otherwise a long call on an
    otherwise idle account would lose it). ZADD XX: a slot already released stays released."""
    key = redis_keys.account_slots(slot.account.id)
    pipeline.zadd(key, {slot.slot_id: at_ms}, xx=True)
    pipeline.pexpire(key, ttl_ms)


async def heartbeat(slot: Slot, ttl_ms: int) -> None:
    """Mark a long-running slot as alive (one round trip; ``proxy.scheduling.keep_alive`` does
    this, with the key's in-flight entry, for every call while it runs). Never raises."""
    try:
        redis = await async_redis.get()
        async with redis.pipeline(transaction=True) as pipeline:
            queue_heartbeat(pipeline, slot, at_ms=clock.now_ms(), ttl_ms=ttl_ms)
            await pipeline.execute()
    except Exception:
        logger.warning("slot heartbeat failed", exc_info=True)


async def pace(slot: Slot, interval_ms: int) -> None:
    """Wait so that starts on one account are at least ``interval_ms`` apart (spec §3.5).

    No wait when the account had nothing in flight.
    """
    if interval_ms <= 0 or slot.previous_start_ms is None:
        return
    wait_ms = interval_ms - (clock.now_ms() - slot.previous_start_ms)
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)


@dataclass
class WaitPolicy:
    """How long a request waits for a slot when every candidate is busy."""

    timeout_seconds: float = field(
        default_factory=lambda: float(settings.SCHEDULER_WAIT_TIMEOUT_SECONDS)
    )
    first_pause: float = 0.01
    longest_pause: float = 0.2
