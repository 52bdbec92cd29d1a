"""The bulk deletions' pace (bots.pipeline.bulk) around a long retry_after: the job's lock is
kept for as long as it waits, and a chunk that must wait longer than it may is continued after
the wait — against the real lock in Redis, with the pacer's clock stepped by hand."""

from __future__ import annotations

import pytest
from django_redis import get_redis_connection

from bots.clients.telegram import TelegramRetryableError
from bots.pipeline import bulk
from bots.redis_keys import bulk_deletion_lock
from bots.services.bulk_lock import bulk_lock_acquire
from tests.fakes.telegram import BOT_ID


class SteppedClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _rate_limited(retry_after: int) -> TelegramRetryableError:
    return TelegramRetryableError(
        method="deleteMessage",
        status=429,
        description=f"Too Many Requests: retry after {retry_after}",
        error_code=429,
        retry_after=retry_after,
    )


@pytest.fixture
def lock_token(db):
    token = bulk_lock_acquire(bot_id=BOT_ID, ttl_seconds=bulk.RUNNING_LOCK_SECONDS)
    assert token is not None
    return token


def test_the_lock_outlives_a_retry_after_longer_than_its_ttl(lock_token):
    redis = get_redis_connection("default")
    clock = SteppedClock()
    lock_left_while_sleeping = []

    def sleep(seconds: float) -> None:
        lock_left_while_sleeping.append(redis.pttl(bulk_deletion_lock(BOT_ID)))
        clock.sleep(seconds)

    pacer = bulk.Pacer(5, monotonic=clock.monotonic, sleep=sleep)
    lock = bulk.LockKeeper(bot_id=BOT_ID, token=lock_token, pacer=pacer)
    outcomes = iter([_rate_limited(45), bulk.DELETED, bulk.DELETED])

    def attempt(item: int) -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    recorded = []
    stopped = bulk.run_paced(
        [1, 2],
        attempt,
        pacer=pacer,
        budget=bulk.Budget(deadline=clock.now + 120, max_items=None),
        lock=lock,
        record=lambda item, outcome: recorded.append((item, outcome)),
    )

    assert stopped is None
    assert recorded == [(1, "deleted"), (2, "deleted")]
    [(longest, lock_left)] = [
        (seconds, left)
        for seconds, left in zip(clock.sleeps, lock_left_while_sleeping, strict=True)
        if seconds > 1
    ]
    assert longest == pytest.approx(45, abs=0.5)  # the retry_after, waited in full
    # The lock's TTL covered the whole wait (a running job's 30 s would have lapsed in it, and
    # another purge or wipe could have started meanwhile).
    assert lock_left > 45 * 1000


def test_a_wait_past_the_chunks_deadline_continues_after_it(lock_token):
    clock = SteppedClock()
    pacer = bulk.Pacer(5, monotonic=clock.monotonic, sleep=clock.sleep)
    lock = bulk.LockKeeper(bot_id=BOT_ID, token=lock_token, pacer=pacer)

    def attempt(item: int) -> str:
        raise _rate_limited(300)

    stopped = bulk.run_paced(
        [1],
        attempt,
        pacer=pacer,
        budget=bulk.Budget(deadline=clock.now + 120, max_items=None),
        lock=lock,
        record=lambda item, outcome: None,
    )

    assert stopped == bulk.Stopped(countdown=300.0)
    assert clock.sleeps == []  # nothing slept that the chunk could not finish
