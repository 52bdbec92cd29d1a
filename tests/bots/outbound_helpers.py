"""Shortcuts of the outbound-limiter tests: conversations in bulk, Telegram's redelivery loop."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.db import connections
from django.test import Client

from bots.models import BotUser, Topic
from tests.bots.conftest import Clock, Webhook
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


def deliver_like_telegram(
    updates: list[dict], *, clock: Clock, concurrency: int, max_rounds: int = 8
) -> list[int]:
    """Deliver ``updates`` all at once (``concurrency`` at a time), then redeliver every one
    answered with anything but 200 — Telegram's retry — after its 60 s (the clock moves; the
    limiter's windows have passed for real) until all are acknowledged. Returns how many were
    redelivered in each round after the first."""
    pending = updates
    redelivered = []
    with ThreadPoolExecutor(concurrency) as pool:
        for _ in range(max_rounds):
            statuses = list(pool.map(deliver_one, pending))
            pending = [
                update for update, status in zip(pending, statuses, strict=True) if status != 200
            ]
            if not pending:
                return redelivered
            redelivered.append(len(pending))
            time.sleep(1.2)
            # Only the bot's own clock jumps (the user's per-minute gate, the claims' leases):
            # the limiter and the fake's limits run on real time, the windows scaled to pass
            # in the 1.2 s above — a 429's block still in force stays in force.
            clock.advance(seconds=61, outbound_limiter=False)
    raise AssertionError(f"{len(pending)} updates never acknowledged")


def texts_in_topic(telegram: FakeTelegram, thread_id: int) -> list[str | None]:
    return [message.text for message in telegram.topic_messages(thread_id)]


def person(telegram: FakeTelegram, user_id: int) -> FakeUser:
    return telegram.user(user_id, f"U{user_id}")
