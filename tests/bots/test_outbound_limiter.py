"""The outbound limiter (``bots.outbound.limiter``) on the real Redis: its decisions, stepped
through with explicit clock readings (``now_ms``), and shared by every limiter of the bot — in
this process or in others (the cross-process half is the broadcast test through a real worker,
whose pacing the fake Bot API's timestamps show)."""

from __future__ import annotations

import pytest
from django.conf import settings

from bots import redis_keys
from bots.outbound.limiter import (
    TELEGRAM_LIMITS,
    WAITER_SECONDS,
    Limits,
    OutboundLimiter,
    Permit,
    Priority,
)

BOT = 4242
T0 = 1_800_000_000_000  # an epoch in milliseconds


@pytest.fixture
def limiter() -> OutboundLimiter:
    return OutboundLimiter(bot_id=BOT)


def _granted(outcome) -> Permit:
    assert isinstance(outcome, Permit), f"refused, wait {outcome}"
    return outcome


def test_telegram_limits_are_30_a_second_and_one_a_second_per_chat():
    assert Limits(per_second=30, chat_interval=1.0, window=1.0, lease=25.0) == TELEGRAM_LIMITS
    assert round(TELEGRAM_LIMITS.spacing * 1000) == 33


def test_calls_are_spread_over_the_second(limiter):
    _granted(limiter.try_acquire(chat_id=1, now_ms=T0))

    assert limiter.try_acquire(chat_id=2, now_ms=T0 + 10) == pytest.approx(0.023)
    _granted(limiter.try_acquire(chat_id=2, now_ms=T0 + 33))


def test_at_most_30_calls_count_in_any_window_until_they_end(limiter):
    permits = [
        _granted(limiter.try_acquire(chat_id=100 + number, now_ms=T0 + 33 * number))
        for number in range(30)
    ]
    # In flight, a permit counts as if its call ended a lease (25 s) after its grant.
    assert limiter.try_acquire(chat_id=500, now_ms=T0 + 990) == pytest.approx(25.0 + 1.0 - 0.99)

    for number, permit in enumerate(permits):
        limiter.release(permit, now_ms=T0 + 33 * number + 5)  # each call took 5 ms

    # The oldest call ended at T0 + 5: the 31st may start one window after that, not sooner.
    assert limiter.try_acquire(chat_id=500, now_ms=T0 + 1000) == pytest.approx(0.005)
    _granted(limiter.try_acquire(chat_id=500, now_ms=T0 + 1005))
    assert limiter.try_acquire(chat_id=501, now_ms=T0 + 1020) == pytest.approx(0.018)  # spacing


def test_one_call_into_a_chat_then_nothing_into_it_for_a_second_after_it_ended(limiter):
    permit = _granted(limiter.try_acquire(chat_id=7, now_ms=T0))

    assert limiter.try_acquire(chat_id=7, now_ms=T0 + 500) == pytest.approx(25.5)
    limiter.release(permit, now_ms=T0 + 200)
    assert limiter.try_acquire(chat_id=7, now_ms=T0 + 500) == pytest.approx(0.7)
    _granted(limiter.try_acquire(chat_id=8, now_ms=T0 + 500))  # another chat is free
    _granted(limiter.try_acquire(chat_id=7, now_ms=T0 + 1200))


def test_on_redis_time_the_next_call_into_a_chat_waits_a_whole_interval_after_the_end(
    limiter, redis_client
):
    """Redis TIME in microseconds: the chat is free no sooner than a whole interval after the
    release began — never a fraction of a millisecond early (the fake Bot API, which measures
    arrivals to the microsecond, answers 429 to a call 999.x ms after the last one)."""
    for _ in range(20):
        permit = _granted(limiter.acquire(chat_id=-1009, timeout=1))
        seconds, microseconds = redis_client.time()
        released_no_sooner_than_us = seconds * 1_000_000 + microseconds
        limiter.release(permit)
        value = redis_client.get(redis_keys.outbound_chat(BOT, -1009))
        free_at_ms = int(value.split(b":")[0])
        assert free_at_ms * 1000 >= released_no_sooner_than_us + 1_000_000
        redis_client.delete(redis_keys.outbound_chat(BOT, -1009))


def test_a_retry_after_holds_back_everybody_and_a_shorter_one_does_not_shorten_it(limiter):
    other_process = OutboundLimiter(bot_id=BOT)

    assert limiter.block(seconds=5, now_ms=T0) == 5.0
    assert other_process.block(seconds=2, now_ms=T0 + 1000) == 4.0

    assert other_process.try_acquire(chat_id=1, now_ms=T0 + 1000) == pytest.approx(4.0)
    assert limiter.try_acquire(chat_id=2, now_ms=T0 + 4999) == pytest.approx(0.001)
    _granted(other_process.try_acquire(chat_id=1, now_ms=T0 + 5000))


def test_another_bot_has_its_own_limits(limiter):
    limiter.block(seconds=30, now_ms=T0)

    _granted(OutboundLimiter(bot_id=BOT + 1).try_acquire(chat_id=1, now_ms=T0))


def test_a_crashed_holders_permit_lapses_after_its_lease(limiter):
    _granted(limiter.try_acquire(chat_id=9, now_ms=T0))  # never released

    assert limiter.try_acquire(chat_id=9, now_ms=T0 + 25_000) == pytest.approx(1.0)
    _granted(limiter.try_acquire(chat_id=9, now_ms=T0 + 26_000))


def test_every_key_has_a_ttl(limiter, redis_client):
    permit = _granted(limiter.try_acquire(chat_id=3))
    limiter.block(seconds=2)

    keys = {
        key.decode(): redis_client.pttl(key)
        for key in redis_client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}bots:outbound:*")
    }
    # The next-start mark lives one spacing (33 ms): on a loaded machine it may be gone by now.
    long_lived = {
        redis_keys.outbound_global(BOT),
        redis_keys.outbound_chat(BOT, 3),
        redis_keys.outbound_blocked(BOT),
    }
    assert long_lived <= set(keys) <= long_lived | {redis_keys.outbound_next_start(BOT)}
    # -1 would be a key without a TTL (-2: expired between the scan and the PTTL).
    assert all(ttl != -1 and ttl <= 26_000 for ttl in keys.values()), keys
    assert all(keys[key] > 0 for key in long_lived), keys
    limiter.release(permit)
    assert 0 < redis_client.pttl(redis_keys.outbound_chat(BOT, 3)) <= 1000


def test_acquire_gives_up_at_once_when_the_wait_outlasts_its_timeout(limiter):
    slept = []
    waiting = OutboundLimiter(bot_id=BOT, sleep=slept.append)
    limiter.block(seconds=60)

    assert waiting.acquire(chat_id=1, timeout=3) is None
    assert slept == []


def test_acquire_sleeps_in_short_steps_telling_on_wait(limiter):
    slept, waits = [], []
    readings = iter([0.0, 1.0, 2.0])  # the caller's monotonic clock: deadline at 3.0
    waiting = OutboundLimiter(bot_id=BOT, sleep=slept.append, monotonic=lambda: next(readings))
    limiter.block(seconds=2)

    assert waiting.acquire(chat_id=1, timeout=3, on_wait=waits.append) is None
    assert slept == [0.5]  # never one long sleep: on_wait runs every half second at least
    assert [round(wait) for wait in waits] == [2]


def test_acquire_returns_a_permit_granted_after_the_block(limiter, redis_client):
    seconds, microseconds = redis_client.time()
    blocked_until_ms = seconds * 1000 + microseconds // 1000 + 300
    limiter.block(seconds=0.3, now_ms=blocked_until_ms - 300)

    permit = limiter.acquire(chat_id=1, timeout=5)

    assert permit is not None and permit.granted_at_ms >= blocked_until_ms


# ------------------------------------------------------------------ groups, priorities (#24)

GROUP = -1001234567890


def test_telegram_limits_allow_20_messages_a_minute_into_a_group():
    assert (TELEGRAM_LIMITS.group_per_window, TELEGRAM_LIMITS.group_window) == (20, 60.0)


def _fill_group(limiter: OutboundLimiter) -> None:
    """20 messages into the group, one every 2 s from T0, each taking 100 ms (the last ends at
    T0 + 38.1 s)."""
    for number in range(20):
        permit = _granted(limiter.try_acquire(chat_id=GROUP, now_ms=T0 + 2000 * number))
        limiter.release(permit, now_ms=T0 + 2000 * number + 100)


def test_a_group_takes_20_messages_in_any_minute_counted_to_their_end(limiter):
    _fill_group(limiter)

    # The first of the 20 ended at T0 + 100: the 21st may start a minute after that.
    assert limiter.try_acquire(chat_id=GROUP, now_ms=T0 + 40_000) == pytest.approx(20.1)
    _granted(limiter.try_acquire(chat_id=1, now_ms=T0 + 40_000))  # a private chat is free
    _granted(limiter.try_acquire(chat_id=GROUP, now_ms=T0 + 60_100))


def test_deletions_take_no_bucket_but_wait_out_a_block(limiter):
    _fill_group(limiter)
    assert limiter.try_acquire(chat_id=GROUP, now_ms=T0 + 40_000) > 0  # the group is full

    _granted(limiter.try_acquire(chat_id=GROUP, counted=False, now_ms=T0 + 40_000))
    limiter.block(seconds=3, chat_id=GROUP, now_ms=T0 + 40_000)
    assert limiter.try_acquire(chat_id=GROUP, counted=False, now_ms=T0 + 41_000) == pytest.approx(
        2.0
    )


def test_a_groups_retry_after_blocks_that_group_only(limiter):
    other_process = OutboundLimiter(bot_id=BOT)

    assert limiter.learn_retry_after(chat_id=GROUP, seconds=5, now_ms=T0) == 5.0

    assert other_process.try_acquire(chat_id=GROUP, now_ms=T0 + 1000) == pytest.approx(4.0)
    _granted(other_process.try_acquire(chat_id=77, now_ms=T0 + 1000))
    _granted(other_process.try_acquire(chat_id=GROUP, now_ms=T0 + 5000))


def test_a_private_chats_retry_after_blocks_the_whole_bot(limiter):
    assert limiter.learn_retry_after(chat_id=77, seconds=2, now_ms=T0) == 2.0

    assert OutboundLimiter(bot_id=BOT).try_acquire(chat_id=78, now_ms=T0 + 500) == pytest.approx(
        1.5
    )


def test_a_waiting_live_call_goes_before_a_broadcast_send(limiter):
    broadcast = OutboundLimiter(bot_id=BOT)
    _granted(broadcast.try_acquire(chat_id=1, priority=Priority.BULK, now_ms=T0))
    # A relay asks 10 ms later: the global spacing (33 ms) makes it wait, as a waiter.
    assert limiter.try_acquire(
        chat_id=GROUP, priority=Priority.LIVE, now_ms=T0 + 10, permit_id="relay"
    ) == pytest.approx(0.023)

    # When the spacing has passed, the broadcast asks first — and is held back for the relay.
    assert broadcast.try_acquire(chat_id=2, priority=Priority.BULK, now_ms=T0 + 40) > 0
    relay = _granted(
        limiter.try_acquire(
            chat_id=GROUP, priority=Priority.LIVE, now_ms=T0 + 41, permit_id="relay"
        )
    )
    assert relay.id == "relay"
    # The relay took its slot: the broadcast goes next.
    _granted(broadcast.try_acquire(chat_id=2, priority=Priority.BULK, now_ms=T0 + 80))


def test_a_card_edit_waits_while_a_relay_waits_for_the_group(limiter):
    _fill_group(limiter)
    relay = {"chat_id": GROUP, "priority": Priority.LIVE, "permit_id": "relay"}
    assert limiter.try_acquire(**relay, now_ms=T0 + 60_000) > 0

    # The window frees a slot at T0 + 60 100: the card edit asking first does not get it.
    assert limiter.try_acquire(chat_id=GROUP, priority=Priority.CARD, now_ms=T0 + 60_150) > 0
    _granted(limiter.try_acquire(**relay, now_ms=T0 + 60_160))


def test_a_relay_waiting_for_the_group_leaves_the_global_bucket_to_a_broadcast(limiter):
    _fill_group(limiter)
    assert limiter.try_acquire(chat_id=GROUP, priority=Priority.LIVE, now_ms=T0 + 40_000) > 0

    _granted(limiter.try_acquire(chat_id=5, priority=Priority.BULK, now_ms=T0 + 40_001))


def test_a_waiter_that_stopped_asking_holds_nobody_back_after_waiter_seconds(limiter):
    _granted(limiter.try_acquire(chat_id=1, now_ms=T0))
    assert limiter.try_acquire(chat_id=GROUP, priority=Priority.LIVE, now_ms=T0 + 1) > 0

    assert limiter.try_acquire(chat_id=2, priority=Priority.BULK, now_ms=T0 + 1000) > 0
    _granted(
        limiter.try_acquire(
            chat_id=2, priority=Priority.BULK, now_ms=T0 + 1 + round(WAITER_SECONDS * 1000) + 1
        )
    )


def test_a_caller_giving_up_withdraws_as_a_waiter(limiter, redis_client):
    limiter.block(seconds=60)

    assert limiter.acquire(chat_id=GROUP, priority=Priority.LIVE, timeout=1) is None

    assert redis_client.zcard(redis_keys.outbound_waiters(BOT)) == 0
    assert redis_client.zcard(redis_keys.outbound_chat_waiters(BOT, GROUP)) == 0


def test_group_and_waiter_keys_have_ttls(limiter, redis_client):
    limiter.release(_granted(limiter.try_acquire(chat_id=GROUP)))
    limiter.block(seconds=2, chat_id=GROUP)
    assert limiter.try_acquire(chat_id=GROUP, priority=Priority.LIVE) > 0

    keys = [
        redis_keys.outbound_group(BOT, GROUP),
        redis_keys.outbound_chat_blocked(BOT, GROUP),
        redis_keys.outbound_chat_waiters(BOT, GROUP),
    ]
    assert 0 < redis_client.pttl(keys[0]) <= 85_000  # the window and one lease
    assert 0 < redis_client.pttl(keys[1]) <= 2_000
    assert 0 < redis_client.pttl(keys[2]) <= round(WAITER_SECONDS * 1000)


def test_an_album_counts_as_its_items_in_the_windows(limiter):
    album = _granted(limiter.try_acquire(chat_id=GROUP, weight=5, now_ms=T0))
    limiter.release(album, now_ms=T0 + 100)
    for number in range(15):  # 15 more messages fill the group's 20
        permit = _granted(limiter.try_acquire(chat_id=GROUP, now_ms=T0 + 2000 * (number + 1)))
        limiter.release(permit, now_ms=T0 + 2000 * (number + 1) + 100)

    assert limiter.try_acquire(chat_id=GROUP, now_ms=T0 + 40_000) == pytest.approx(20.1)
    # A 3-item album waits for three of them to leave the window: the album's own (T0 + 100).
    assert limiter.try_acquire(chat_id=GROUP, weight=3, now_ms=T0 + 40_000) == pytest.approx(20.1)
    # An album larger than the window is capped at the window (it could never fit otherwise).
    _granted(limiter.try_acquire(chat_id=GROUP, weight=50, now_ms=T0 + 200_000))


def test_after_a_flush_the_limiter_starts_fresh_and_nothing_breaks(limiter, redis_client):
    held = _granted(limiter.try_acquire(chat_id=GROUP, priority=Priority.LIVE))
    limiter.block(seconds=30, chat_id=GROUP)
    assert limiter.try_acquire(chat_id=GROUP, priority=Priority.LIVE) > 0  # a waiter now
    for key in redis_client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}bots:outbound:*"):
        redis_client.delete(key)  # what a FLUSHALL does to the bot's keys

    limiter.release(held)  # the permit's keys are gone: nothing to release, no error
    fresh = _granted(limiter.try_acquire(chat_id=GROUP, priority=Priority.BULK))
    limiter.release(fresh)

    # (an end is counted to the next whole millisecond: at most 1 ms ahead of Redis TIME)
    assert redis_client.zcard(redis_keys.outbound_group(BOT, GROUP)) == 0 or all(
        score <= _redis_ms(redis_client) + 1
        for _, score in redis_client.zrange(
            redis_keys.outbound_group(BOT, GROUP), 0, -1, withscores=True
        )
    )


def _redis_ms(redis_client) -> int:
    seconds, microseconds = redis_client.time()
    return seconds * 1000 + microseconds // 1000
