"""Fair admission (issue 25 item 2), one poll at a time against real Redis: when every account
is at its cap, freed slots go round-robin across client keys whatever the order the waiters
poll in, first-come within a key; dead waiters are pruned by the age of their last poll; the
fast path yields to waiters; the registry expires and survives a FLUSHALL."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
from django.conf import settings

from common import clock
from proxy import redis_keys
from proxy.domain.slots import SchedulerSettings
from proxy.scheduling import scheduler
from proxy.scheduling.fair_admission import (
    FRONT_PAUSE_SECONDS,
    REGISTRY_TTL_MS,
    WAITER_STALE_MS,
    Waiter,
)
from proxy.scheduling.ranking import rank
from tests.proxy.factories import make_account_view

ONE_SLOT = SchedulerSettings(strategy="smart", max_concurrent_per_account=1, request_interval_ms=0)


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _registry_keys() -> list[str]:
    return sorted(
        key.decode() for key in _client().scan_iter(match=f"{settings.REDIS_KEY_PREFIX}fair:*")
    )


@pytest.fixture
def names():
    """Names unique to the test; the registry and the test's slots are removed afterwards (the
    registry is shared by the whole test run: a leftover would hold up other tests)."""
    suffix = uuid.uuid4().hex[:10]
    yield lambda name: f"{name}-{suffix}"
    client = _client()
    for pattern in ("fair:*", f"scheduler:slots:*{suffix}"):
        for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}{pattern}"):
            client.delete(key)


async def _poll_all(waiters: list[Waiter], accounts, *, now_ms: int | None = None):
    """Every waiter polls once, in the order given; the (waiter, slot) pairs admitted."""
    admitted = []
    for waiter in waiters:
        slot = await waiter.take_turn(accounts, ONE_SLOT, now_ms=now_ms)
        if slot is not None:
            admitted.append((waiter, slot))
    return admitted


def test_freed_slots_go_round_robin_across_keys_not_first_come(names):
    shared = make_account_view(names("acct"))
    heavy = [Waiter(names("key-a")) for _ in range(5)]
    light = [Waiter(names("key-b")) for _ in range(2)]

    async def scenario() -> list[Waiter]:
        slot = await scheduler.acquire(shared, ONE_SLOT)  # the pool at its cap
        assert await _poll_all(heavy + light, [shared]) == []  # all wait, the heavy key first
        order: list[Waiter] = []
        while len(order) < len(heavy + light):
            await scheduler.release(slot)
            # The heavy key's waiters always poll first: first-come, they would win every time.
            waiting = [waiter for waiter in heavy + light if waiter not in order]
            [(waiter, slot)] = await _poll_all(waiting, [shared])
            order.append(waiter)
        await scheduler.release(slot)
        return order

    order = asyncio.run(scenario())

    assert order == [heavy[0], light[0], heavy[1], light[1], heavy[2], heavy[3], heavy[4]]
    assert _registry_keys() == [redis_keys.fair_sequence()]


def test_a_waiter_that_cannot_use_the_freed_account_does_not_hold_it(names):
    first, second = make_account_view(names("first")), make_account_view(names("second"))
    only_first = Waiter(names("key-a"))  # its key's turn comes first
    only_second = Waiter(names("key-b"))

    async def scenario():
        held_first = await scheduler.acquire(first, ONE_SLOT)
        held_second = await scheduler.acquire(second, ONE_SLOT)
        await only_first.take_turn([first], ONE_SLOT)
        await only_second.take_turn([second], ONE_SLOT)
        await scheduler.release(held_second)
        admitted = [
            await only_first.take_turn([first], ONE_SLOT),
            await only_second.take_turn([second], ONE_SLOT),
        ]
        await only_first.leave()
        for slot in (held_first, admitted[1]):
            await scheduler.release(slot)
        return admitted

    waiting, admitted = asyncio.run(scenario())

    assert waiting is None
    assert admitted.account.id == second.id


def test_a_dead_waiter_keeps_its_turn_until_its_last_poll_is_stale(names):
    shared = make_account_view(names("acct"))
    dead = Waiter(names("key-a"))  # polls once, then its worker is killed
    alive = Waiter(names("key-b"))

    async def scenario():
        now = clock.now_ms()
        slot = await scheduler.acquire(shared, ONE_SLOT)
        await dead.take_turn([shared], ONE_SLOT, now_ms=now)
        await alive.take_turn([shared], ONE_SLOT, now_ms=now)
        await scheduler.release(slot)
        before = await alive.take_turn([shared], ONE_SLOT, now_ms=now + WAITER_STALE_MS)
        after = await alive.take_turn([shared], ONE_SLOT, now_ms=now + WAITER_STALE_MS + 1)
        await scheduler.release(after)
        return before, after

    before, after = asyncio.run(scenario())

    assert before is None
    assert after.account.id == shared.id
    # The dead waiter was pruned with its key: nothing is left but the sequence.
    assert _registry_keys() == [redis_keys.fair_sequence()]


def test_the_fast_path_takes_no_slot_past_waiting_requests(names):
    shared = make_account_view(names("acct"))
    waiter = Waiter(names("key-a"))

    async def scenario():
        held = await scheduler.acquire(shared, ONE_SLOT)
        await waiter.take_turn([shared], ONE_SLOT)
        await scheduler.release(held)
        _, newcomer, _ = await scheduler.order_and_acquire(rank([shared], "smart"), ONE_SLOT)
        served = await waiter.take_turn([shared], ONE_SLOT)
        await scheduler.release(served)
        _, after, _ = await scheduler.order_and_acquire(rank([shared], "smart"), ONE_SLOT)
        await scheduler.release(after)
        return newcomer, served, after

    newcomer, served, after = asyncio.run(scenario())

    assert newcomer is None  # a slot was free, but a request was waiting for it
    assert served.account.id == shared.id
    assert after.account.id == shared.id  # no one waits any more: the fast path again


def test_every_registry_key_expires_and_leaving_removes_the_waiter(names):
    shared = make_account_view(names("acct"))
    waiters = [Waiter(names("key-a")), Waiter(names("key-b"))]

    async def register():
        held = await scheduler.acquire(shared, ONE_SLOT)
        await _poll_all(waiters, [shared])
        return held

    held = asyncio.run(register())
    client = _client()
    keys = _registry_keys()
    ttls = {key: client.pttl(key) for key in keys}

    async def leave():
        for waiter in waiters:
            await waiter.leave()
        await scheduler.release(held)

    asyncio.run(leave())

    assert len(keys) == 6  # the rotation, the sequence, two queues, two waiter records
    assert all(0 < ttl <= REGISTRY_TTL_MS for ttl in ttls.values()), ttls
    assert _registry_keys() == [redis_keys.fair_sequence()]


def test_a_flushall_mid_wait_leaves_nothing_wedged(private_redis, settings, names):
    settings.REDIS_URL = private_redis.url
    shared = make_account_view(names("acct"))
    heavy = [Waiter(names("key-a")) for _ in range(2)]
    light = Waiter(names("key-b"))

    async def scenario():
        await scheduler.acquire(shared, ONE_SLOT)
        await _poll_all([*heavy, light], [shared])
        held_numbers = [waiter.arrival for waiter in [*heavy, light]]
        redis.Redis.from_url(private_redis.url).flushall()  # the held slot goes too
        order = []
        while len(order) < 3:
            waiting = [waiter for waiter in [light, *heavy] if waiter not in order]
            [(waiter, slot)] = await _poll_all(waiting, [shared])
            order.append(waiter)
            await scheduler.release(slot)
        return held_numbers, order

    held_numbers, order = asyncio.run(scenario())

    # After the flush the first to poll re-registers alone and is served; the others keep
    # their arrival numbers and are served in turn.
    assert order == [light, heavy[0], heavy[1]]
    assert [waiter.arrival for waiter in [*heavy, light]] == held_numbers
    client = redis.Redis.from_url(private_redis.url)
    assert [key.decode() for key in client.scan_iter(match="*fair:*")] == [
        redis_keys.fair_sequence()
    ]
    assert int(client.get(redis_keys.fair_sequence())) > max(held_numbers)
    assert client.zcard(redis_keys.account_slots(shared.id)) == 0


def test_the_first_two_of_each_key_poll_often_and_the_rest_back_off(names):
    shared = make_account_view(names("acct"))
    heavy = [Waiter(names("key-a")) for _ in range(3)]
    light = Waiter(names("key-b"))

    async def scenario():
        held = await scheduler.acquire(shared, ONE_SLOT)
        await _poll_all([*heavy, light], [shared])
        for waiter in [*heavy, light]:
            await waiter.leave()
        await scheduler.release(held)

    asyncio.run(scenario())

    assert [waiter.rank for waiter in [*heavy, light]] == [0, 1, 2, 0]
    assert [waiter.pause_seconds(0.2) for waiter in [*heavy, light]] == [
        FRONT_PAUSE_SECONDS,
        FRONT_PAUSE_SECONDS,
        0.2,
        FRONT_PAUSE_SECONDS,
    ]


def test_a_waiter_that_no_longer_wants_an_account_is_not_chosen_for_it(names):
    first, second = make_account_view(names("first")), make_account_view(names("second"))
    narrowed = Waiter(names("key-a"))  # its key's turn comes first
    other = Waiter(names("key-b"))

    async def scenario():
        held = [await scheduler.acquire(account, ONE_SLOT) for account in (first, second)]
        await narrowed.take_turn([first, second], ONE_SLOT)
        await other.take_turn([first], ONE_SLOT)
        await narrowed.take_turn([second], ONE_SLOT)  # the first was dropped meanwhile
        await scheduler.release(held[0])
        taken = await other.take_turn([first], ONE_SLOT)
        await narrowed.leave()
        for slot in (taken, held[1]):
            await scheduler.release(slot)
        return taken

    taken = asyncio.run(scenario())

    assert taken.account.id == first.id
