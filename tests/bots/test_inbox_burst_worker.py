"""25 new users writing at once, at Telegram's real limits, each update delivered ONCE (issue 36).

The outside report: "25 new users writing at once, each update delivered once, lost all 25" —
the webhook answered 500 to what its send budget could not fit, and Telegram, which redelivers
only "a reasonable amount of attempts", was the only retry. Here the fake Bot API enforces
Telegram's limits as they are (30 messages a second for the bot, one a second into a chat, 20 a
minute into a group), the webhook runs in this process (one web request per delivery, 25 at
once), and a real Celery worker process — two pool processes, a queue of this test's own —
finishes what the webhooks left in the inbox. Time is real time: the test takes the three
minutes and a bit the limits need for 75 messages into the group (each new user's topic, card
and message).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from celery.app import routes

from bots.models import InboxUpdate, ProcessedUpdate, RelayedMessage, Topic
from bots.pipeline import inbox_queue
from bots.task_names import INBOX_DRAIN_TASK
from config.celery import app as celery_app
from tests.bots.helpers import set_switches
from tests.bots.outbound_helpers import deliver_at_once, person
from tests.conftest import BOT_DELETES_PER_SECOND, CeleryWorkerProcess, run_database_url
from tests.fakes.telegram import MESSAGE_METHODS

# Three minutes of Telegram's pace, a worker process to start and, first in a process, the test
# database to create: more than the suite's default timeout on a loaded machine.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.subprocess,
    pytest.mark.timeout(600),
]

QUEUE = "tests.inbox.burst"
USERS = 25
# Telegram's limits (tdlib/td#2592, the Bot FAQ), kept by the fake and by the bot.
PER_SECOND, CHAT_INTERVAL, GROUP_PER_MINUTE = 30, 1.0, 20
BUDGET_SECONDS = 5.0  # TELEGRAM_SEND_BUDGET_MS' default
# A delivery is answered once its budget for send permits is spent at the latest; what comes
# on top is the calls in flight and the database, on a loaded two-core machine.
ANSWER_MARGIN_SECONDS = 10.0
# The drain may take this much longer than the least the limits allow.
DRAIN_MARGIN_SECONDS = 60.0
LIMIT_ENV = {
    "TELEGRAM_SENDS_PER_SECOND": str(PER_SECOND),
    "TELEGRAM_CHAT_INTERVAL_MS": str(round(CHAT_INTERVAL * 1000)),
    "TELEGRAM_GROUP_SENDS_PER_WINDOW": str(GROUP_PER_MINUTE),
    "TELEGRAM_GROUP_WINDOW_SECONDS": "60",
    "TELEGRAM_SEND_BUDGET_MS": str(round(BUDGET_SECONDS * 1000)),
}


def least_drain_seconds(messages: int) -> float:
    """The least time from the first to the last of ``messages`` messages into one group the
    limits allow: each at least CHAT_INTERVAL after the one before, 60 s after the one
    GROUP_PER_MINUTE before (bench.bot_burst.theoretical_drain, for these limits)."""
    arrivals: list[float] = []
    for k in range(messages):
        at = arrivals[k - 1] + CHAT_INTERVAL if k else 0.0
        if k >= GROUP_PER_MINUTE:
            at = max(at, arrivals[k - GROUP_PER_MINUTE] + 60.0)
        arrivals.append(at)
    return arrivals[-1]


@pytest.fixture
def drains_to_this_tests_worker(monkeypatch):
    """The inbox's nudges go through the real broker to QUEUE, which only this test's worker
    consumes (it queues its own follow-ups on the queue it took them from)."""
    router = routes.Router(
        routes.prepare({INBOX_DRAIN_TASK: {"queue": QUEUE}}),
        celery_app.amqp.queues,
        True,
        app=celery_app,
    )
    monkeypatch.setattr(celery_app.amqp, "router", router)
    monkeypatch.setattr(inbox_queue, "current_app", celery_app)


@pytest.fixture
def worker(django_db_blocker, tmp_path, telegram, drains_to_this_tests_worker):
    process = CeleryWorkerProcess(
        run_database_url(django_db_blocker),
        tmp_path / "worker.log",
        {
            "TELEGRAM_API_BASE": telegram.api_base,
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "SUPPORT_CHAT_ID": str(telegram.support_chat_id),
            "TELEGRAM_DELETES_PER_SECOND": BOT_DELETES_PER_SECOND,
            "BOT_LANGUAGE": "zh",
            **LIMIT_ENV,
        },
        arguments=("--pool", "prefork", "--concurrency", "2", "-Q", QUEUE, "-n", "inbox@%h"),
    )
    yield process
    process.stop()


@pytest.fixture
def telegrams_real_limits(bot_settings, bot_row, telegram):
    for name, value in LIMIT_ENV.items():
        setattr(bot_settings, name, value)
    set_switches(verify_enabled="0")  # new users are relayed at once: topic, card, message
    telegram.enforce_telegram_limits(
        per_second=PER_SECOND, chat_interval=CHAT_INTERVAL, group_per_window=GROUP_PER_MINUTE
    )
    return bot_settings


def _calls_into(telegram, chat_id: int) -> str:
    """The calls into ``chat_id`` in order of arrival (what a failure needs to be read)."""
    first = min(call.at for call in telegram.calls())
    return "\n".join(
        f"{call.at - first:9.3f} {call.method} {call.status}"
        f" {call.params.get('message_thread_id')} {str(call.params.get('text'))[:20]!r}"
        for call in sorted(telegram.calls(), key=lambda call: call.at)
        if call.params.get("chat_id") == chat_id
    )


def _text(user_id: int) -> str:
    return f"hello from {user_id}"


def test_25_new_users_at_once_each_delivered_once_are_all_relayed_once_at_telegrams_pace(
    telegrams_real_limits, worker, telegram
):
    user_ids = range(80_001, 80_001 + USERS)
    people = [person(telegram, user_id) for user_id in user_ids]
    updates = [telegram.private_message(someone, text=_text(someone.id)) for someone in people]
    telegram.forget_calls()
    started = time.monotonic()

    answers = deliver_at_once(updates, concurrency=USERS)  # once each: no redelivery at all

    # Every delivery was answered 200, within its budget (and the calls in flight).
    assert [status for status, _ in answers] == [200] * USERS
    slowest = max(seconds for _, seconds in answers)
    assert slowest < BUDGET_SECONDS + ANSWER_MARGIN_SECONDS, slowest
    left = InboxUpdate.objects.count()
    assert left > 0, "every update fitted in its webhook's budget: the burst was no burst"

    # The worker finishes the rest, at the pace the limits allow.
    least = least_drain_seconds(USERS * 3)
    deadline = started + least + DRAIN_MARGIN_SECONDS + 30
    while InboxUpdate.objects.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not InboxUpdate.objects.exists(), worker.log_path.read_text()[-3000:]

    group = telegram.support_chat_id
    relays = [
        call
        for call in telegram.calls("sendMessage")
        if call.ok and call.params["chat_id"] == group and call.params["text"].startswith("hello")
    ]
    drained_after = max(call.at for call in relays) - min(call.at for call in telegram.calls())
    assert drained_after <= least + DRAIN_MARGIN_SECONDS, (drained_after, least)
    # Each message exactly once, into its own user's topic (one topic each), none lost.
    by_text = Counter(call.params["text"] for call in relays)
    assert by_text == {_text(user_id): 1 for user_id in user_ids}
    topics = {topic.user_id: topic.thread_id for topic in Topic.objects.all()}
    assert set(topics) == set(user_ids)
    for call in relays:
        user_id = int(call.params["text"].rsplit(" ", 1)[1])
        assert call.params["message_thread_id"] == topics[user_id]
    assert Counter(telegram.topic(thread).name for thread in topics.values()) == {
        f"U{user_id}": 1 for user_id in user_ids
    }
    assert len([t for t in telegram.topics() if not t.deleted]) == USERS  # no stray topic
    ledger = Counter(RelayedMessage.objects.values_list("user_id", flat=True))
    assert ledger == dict.fromkeys(user_ids, 1)
    assert Counter(ProcessedUpdate.objects.values_list("status", flat=True)) == {"processed": USERS}
    # Within Telegram's limits all along: the fake, which enforces them, refused nothing.
    assert telegram.rate_limited_calls() == [], _calls_into(telegram, group)
    into_group = [
        call
        for call in telegram.calls()
        if call.ok and call.method in MESSAGE_METHODS and call.params.get("chat_id") == group
    ]
    assert Counter(call.method for call in into_group) == {
        "createForumTopic": USERS,
        "sendMessage": USERS * 2,  # the card and the message
    }
