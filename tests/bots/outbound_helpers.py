"""Shortcuts of the outbound-limiter tests: conversations in bulk, a burst of deliveries, the
inbox's workers."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.db import connections
from django.test import Client

from bots.models import BotUser, InboxUpdate, Topic
from tests.bots.conftest import Webhook
from tests.fakes.telegram import FakeTelegram, FakeUser


def ongoing_conversations(
    telegram: FakeTelegram, *, bot_id: int, now: datetime, user_ids: range
) -> dict[int, int]:
    """Verified users, each with an open topic and its pinned card in the fake's group, as an
    ongoing conversation has them. Returns user id → thread id."""
    people = [telegram.user(user_id, f"U{user_id}") for user_id in user_ids]
    telegram.met(*people)
    threads = {}
    for person in people:
        thread_id = telegram.create_topic_by_hand(person.first_name)
        card = telegram.bot_sends(telegram.support_chat_id, text="card", thread_id=thread_id)
        threads[person.id] = (thread_id, card)
    BotUser.objects.bulk_create(
        BotUser(
            bot_id=bot_id,
            user_id=person.id,
            first_name=person.first_name,
            is_verified=True,
            verified_at=now,
            first_seen_at=now,
            last_seen_at=now,
        )
        for person in people
    )
    Topic.objects.bulk_create(
        Topic(
            bot_id=bot_id,
            user_id=person.id,
            thread_id=threads[person.id][0],
            title=person.first_name,
            pinned_msg_id=threads[person.id][1],
            created_at=now,
        )
        for person in people
    )
    return {user_id: thread_id for user_id, (thread_id, _) in threads.items()}


def deliver_one(update: dict) -> int:
    """One delivery of ``update`` as a web request of its own; the answer's status."""
    try:
        return Webhook(Client()).deliver(update).status_code
    finally:
        connections.close_all()  # the thread's own database connection


def deliver_at_once(updates: list[dict], *, concurrency: int) -> list[tuple[int, float]]:
    """Deliver each update once, ``concurrency`` at a time (Telegram's webhook connections);
    (status, seconds until answered) of each, in order."""

    def timed(update: dict) -> tuple[int, float]:
        started = time.monotonic()
        status = deliver_one(update)
        return status, time.monotonic() - started

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(timed, updates))


def drain_with_workers(bot_id: int, *, workers: int, timeout: float) -> None:
    """The inbox's worker, ``workers`` of them at once in threads (as Celery's processes),
    on real time, until the inbox is empty; fails after ``timeout`` seconds."""
    from bots.pipeline.inbox_work import drain_inbox

    deadline = time.monotonic() + timeout

    def work() -> None:
        try:
            while time.monotonic() < deadline:
                drain_inbox(bot_id=bot_id, drain_seconds=10)
                if not InboxUpdate.objects.exists():
                    return
                time.sleep(0.1)  # the rows left are not due yet
        finally:
            connections.close_all()  # the thread's own database connection

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: work(), range(workers)))
    left = InboxUpdate.objects.count()
    assert left == 0, f"{left} updates still in the inbox after {timeout} s"


def texts_in_topic(telegram: FakeTelegram, thread_id: int) -> list[str | None]:
    return [message.text for message in telegram.topic_messages(thread_id)]


def person(telegram: FakeTelegram, user_id: int) -> FakeUser:
    return telegram.user(user_id, f"U{user_id}")


def limiter_state(bot_id: int, chat_id: int) -> dict[str, object]:
    """The shared limiter's keys for the bot and ``chat_id`` as Redis holds them now, with
    their TTLs and Redis TIME (ms): what a test that waited in vain prints to say why."""
    from django_redis import get_redis_connection

    from bots import redis_keys

    redis = get_redis_connection("default")
    seconds, microseconds = redis.time()
    state: dict[str, object] = {"now_ms": seconds * 1000 + microseconds // 1000}
    keys = [
        redis_keys.outbound_global(bot_id),
        redis_keys.outbound_next_start(bot_id),
        redis_keys.outbound_blocked(bot_id),
        redis_keys.outbound_waiters(bot_id),
        redis_keys.outbound_chat(bot_id, chat_id),
        redis_keys.outbound_group(bot_id, chat_id),
        redis_keys.outbound_chat_blocked(bot_id, chat_id),
        redis_keys.outbound_chat_waiters(bot_id, chat_id),
    ]
    for key in keys:
        kind = redis.type(key).decode()
        if kind == "zset":
            entries = redis.zrange(key, 0, -1, withscores=True)
            # The latest few (a window holds up to its limit): the ones that decide a wait.
            value: object = [(member.decode(), int(score)) for member, score in entries[-5:]]
            value = {"count": len(entries), "last": value}
        elif kind == "string":
            value = redis.get(key).decode()
        else:
            continue
        state[key.rsplit(":outbound:", 1)[-1]] = (value, redis.pttl(key))
    return state
