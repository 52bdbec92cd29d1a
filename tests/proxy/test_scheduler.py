"""Strategies, the shared cursor and the Redis slots (spec §3.3–§3.5), against real Redis."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

from proxy.accounts import AccountView
from proxy.domain.slots import SchedulerSettings
from proxy.scheduling import scheduler
from proxy.scheduling.ranking import rank
from tests.proxy.conftest import reset_rotation
from tests.proxy.factories import make_account_view

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def account(account_id: str, **fields) -> AccountView:
    return make_account_view(account_id, now=NOW, **fields)


@pytest.fixture
def fresh(request):
    """Unique account ids per test and a reset cursor; slots are cleaned afterwards."""
    reset_rotation()
    suffix = f"{request.node.name}-{time.monotonic_ns()}"
    yield suffix
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}scheduler:slots:*{suffix}"):
        client.delete(key)
    client.close()


def _settings(strategy: str = "smart", max_slots: int = 3) -> SchedulerSettings:
    return SchedulerSettings(
        strategy=strategy, max_concurrent_per_account=max_slots, request_interval_ms=0
    )


async def _order(accounts, strategy, max_slots=3):
    """One scheduling decision: the order, with the slot it took given back."""
    order, slot, _ = await scheduler.order_and_acquire(
        rank(accounts, strategy), _settings(strategy, max_slots)
    )
    if slot is not None:
        await scheduler.release(slot)
    return [candidate.id.split("-")[0] for candidate in order], slot


def run(coroutine):
    return asyncio.run(coroutine)


def test_round_robin_rotates_the_insertion_order_by_the_shared_cursor(fresh):
    pool = [account(f"{name}-{fresh}") for name in "abc"]

    orders = [run(_order(pool, "round_robin"))[0] for _ in range(4)]

    assert orders == [list("abc"), list("bca"), list("cab"), list("abc")]


def test_the_cursor_restarts_when_the_strategy_changes(fresh):
    pool = [account(f"{name}-{fresh}") for name in "abc"]
    run(_order(pool, "round_robin"))
    run(_order(pool, "round_robin"))

    run(_order(pool, "sticky"))

    assert run(_order(pool, "round_robin"))[0] == list("abc")


def test_smart_prefers_lightly_used_accounts_and_penalises_quota_limits(fresh):
    pool = [
        account(f"heavy-{fresh}", window_tokens=9000, window_request_count=30),
        account(f"limited-{fresh}", quota_limit_reached=True),
        account(f"light-{fresh}", window_tokens=1000, window_request_count=3),
    ]

    order, slot = run(_order(pool, "smart"))

    assert order == ["light", "heavy", "limited"]
    assert slot.account.id.startswith("light")


def test_smart_ties_are_rotated(fresh):
    pool = [account(f"{name}-{fresh}") for name in "xyz"]

    firsts = [run(_order(pool, "smart"))[0][0] for _ in range(3)]

    assert firsts == ["x", "y", "z"]


def test_smart_load_comes_from_live_slots(fresh):
    busy, idle = account(f"busy-{fresh}"), account(f"idle-{fresh}")
    held = run(scheduler.acquire(busy, _settings()))

    order, _ = run(_order([busy, idle], "smart"))

    assert order == ["idle", "busy"]
    run(scheduler.release(held))


def test_quota_reset_priority_orders_by_limit_reset_requests_and_last_use(fresh):
    pool = [
        account(f"limited-{fresh}", quota_limit_reached=True, window_reset_at=NOW),
        account(f"late-{fresh}", window_reset_at=NOW + timedelta(hours=3)),
        account(f"soon-{fresh}", window_reset_at=NOW + timedelta(hours=1)),
        account(f"busier-{fresh}", window_reset_at=NOW + timedelta(hours=1), request_count=9),
    ]

    order, _ = run(_order(pool, "quota_reset_priority"))

    assert order == ["soon", "busier", "late", "limited"]


def test_sticky_keeps_the_most_recently_used_account_first(fresh):
    pool = [
        account(f"old-{fresh}", last_used_at=NOW - timedelta(hours=2)),
        account(f"never-{fresh}"),
        account(f"recent-{fresh}", last_used_at=NOW - timedelta(minutes=1)),
    ]

    orders = [run(_order(pool, "sticky"))[0] for _ in range(3)]

    assert orders == [["recent", "old", "never"]] * 3


def test_slots_cap_concurrency_and_busy_accounts_are_skipped(fresh):
    first, second = account(f"a-{fresh}"), account(f"b-{fresh}")
    ranking = rank([first, second], "round_robin")

    async def scenario():
        held = await scheduler.acquire(first, _settings("round_robin", 1))
        order, slot, _ = await scheduler.order_and_acquire(ranking, _settings("round_robin", 1))
        second_held = slot
        order_again, none, _ = await scheduler.order_and_acquire(
            ranking, _settings("round_robin", 1)
        )
        await scheduler.release(held)
        await scheduler.release(second_held)
        return held, slot, none

    held, slot, none = run(scenario())

    assert held is not None
    assert slot.account.id == second.id  # the busy first account was passed over
    assert none is None  # every account at its limit: nothing acquired


def test_a_crashed_workers_slot_is_reclaimed_after_the_ttl(fresh, settings):
    settings.SCHEDULER_SLOT_TTL_SECONDS = 2
    target = account(f"a-{fresh}")
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{target.id}"
    # A slot taken 3 s ago by a worker that died without releasing it.
    client.zadd(key, {"dead-worker-slot": int(time.time() * 1000) - 3000})

    slot = run(scheduler.acquire(target, _settings(max_slots=1)))

    assert slot is not None
    assert client.zrange(key, 0, -1) == [slot.slot_id.encode()]
    assert 0 < client.pttl(key) <= 2000
    run(scheduler.release(slot))
    assert client.exists(key) == 0
    client.close()


def test_pacing_waits_for_the_interval_only_after_a_recent_start(fresh):
    target = account(f"a-{fresh}")

    async def scenario():
        first = await scheduler.acquire(target, _settings())
        second = await scheduler.acquire(target, _settings())
        # Nothing was in flight before the first: even an endless interval is no wait at all
        # (wait_for would raise TimeoutError otherwise).
        await asyncio.wait_for(scheduler.pace(first, 10**9), 5)
        started = time.monotonic()
        await scheduler.pace(second, 200)
        waited = time.monotonic() - started
        await scheduler.release(first)
        await scheduler.release(second)
        return first, second, waited

    first, second, waited = run(scenario())

    assert first.previous_start_ms is None
    assert second.previous_start_ms is not None
    assert waited >= 0.15


def test_a_slot_is_taken_on_the_first_account_with_room_in_one_call(fresh):
    full, free, later = (account(f"{name}-{fresh}") for name in ("full", "free", "later"))
    one_slot = _settings(max_slots=1)

    async def scenario():
        held = await scheduler.acquire(full, one_slot)
        slot = await scheduler.acquire_first_free([full, free, later], one_slot)
        none_left = await scheduler.acquire_first_free([full, free], one_slot)
        for taken in (held, slot):
            await scheduler.release(taken)
        return slot, none_left

    slot, none_left = run(scenario())

    assert slot.account is free and slot.previous_start_ms is None
    assert none_left is None  # both at their limit: nothing taken
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert client.exists(f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{later.id}") == 0
    client.close()


def test_a_heartbeat_keeps_a_long_streams_slot_and_key_alive(fresh, settings):
    target = account(f"a-{fresh}")
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{target.id}"

    slot = run(scheduler.acquire(target, _settings()))
    client.pexpire(key, 200)  # nearly gone
    run(scheduler.heartbeat(slot, 60_000))

    assert client.pttl(key) > 50_000
    assert client.zscore(key, slot.slot_id) is not None
    run(scheduler.release(slot))
    client.close()
