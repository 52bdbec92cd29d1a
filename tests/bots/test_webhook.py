"""The webhook's idempotency and status map (spec §6), end to end over HTTP.

Telegram's redelivery is the retry mechanism: these tests deliver an update, move the clock, and
deliver it again, as Telegram would.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections
from django.test import Client

from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import WEBHOOK_SECRET, Webhook
from tests.bots.helpers import make_user

BUSINESS_TABLES = (BotUser, Topic, RelayedMessage, ProcessedUpdate)


def _row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in BUSINESS_TABLES}


def _claim(telegram, update) -> tuple[str, int]:
    row = ProcessedUpdate.objects.get(bot_id=telegram.bot.id, update_id=update["update_id"])
    return row.status, row.attempts


def _copies_in_topic(telegram, text: str) -> int:
    return sum(
        1
        for topic in telegram.topics()
        for message in telegram.topic_messages(topic.thread_id)
        if message.text == text
    )


@pytest.fixture
def user(telegram):
    return telegram.user(5001, "Bob", username="bob")


@pytest.fixture
def verified(user, telegram, webhook, clock):
    return make_user(user, bot_id=telegram.bot.id, now=clock.now)


# ------------------------------------------------------------------ authentication and parsing


@pytest.mark.parametrize("header", [None, "wrong-secret", ""])
def test_a_missing_or_wrong_secret_is_401_with_zero_writes(webhook, telegram, user, header):
    response = webhook.deliver(telegram.private_message(user, text="hi"), secret=header)

    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert _row_counts() == dict.fromkeys(_row_counts(), 0)
    assert telegram.calls() == []


def test_an_unconfigured_webhook_secret_is_the_same_401(webhook, bot_settings, telegram, user):
    bot_settings.TELEGRAM_WEBHOOK_SECRET = None

    response = webhook.deliver(telegram.private_message(user, text="hi"), secret=WEBHOOK_SECRET)

    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert _row_counts() == dict.fromkeys(_row_counts(), 0)


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"message": {}}', b'{"update_id": "12"}', b'{"update_id": -1}'],
)
def test_a_body_that_is_no_update_is_acknowledged_and_not_recorded(client, webhook, body, telegram):
    response = client.post(
        "/telegram/webhook",
        data=body,
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
    )

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert ProcessedUpdate.objects.count() == 0
    assert telegram.calls() == []


@pytest.mark.django_db
def test_before_setwebhook_every_update_is_500_and_nothing_is_recorded(
    client, bot_settings, clock, telegram, user
):
    response = Webhook(client).deliver(telegram.private_message(user, text="hi"))

    assert response.status_code == 500
    assert response.json() == {"error": "temporary_failure"}
    assert _row_counts() == dict.fromkeys(_row_counts(), 0)
    assert telegram.calls() == []


def test_without_a_bot_token_updates_are_left_for_later(webhook, bot_settings, telegram, user):
    bot_settings.TELEGRAM_BOT_TOKEN = None

    response = webhook.deliver(telegram.private_message(user, text="hi"))

    assert response.status_code == 500
    assert ProcessedUpdate.objects.count() == 0


# ------------------------------------------------------------------ the claim


def test_an_ignored_update_is_marked_processed(webhook, telegram, member):
    update = telegram.group_message(member, thread_id=None, text="chatter in General")

    webhook.deliver_ok(update)

    assert _claim(telegram, update) == ("processed", 0)
    assert telegram.calls() == []


def test_a_duplicate_delivery_makes_no_telegram_call(webhook, telegram, user, verified):
    update = telegram.private_message(user, text="hello")
    webhook.deliver_ok(update)
    telegram.forget_calls()

    webhook.deliver_ok(update)

    assert telegram.calls() == []
    assert _copies_in_topic(telegram, "hello") == 1
    assert RelayedMessage.objects.count() == 1
    assert _claim(telegram, update) == ("processed", 0)


def test_a_fresh_claim_is_in_flight_until_it_is_stale(webhook, telegram, user, verified, clock):
    update = telegram.private_message(user, text="hello")
    telegram.fail("createForumTopic", status=500)
    assert webhook.deliver(update).status_code == 500
    telegram.forget_calls()

    clock.advance(seconds=60)  # exactly 60 s: not older than 60 s yet
    response = webhook.deliver(update)

    assert response.status_code == 500
    assert response.json() == {"error": "temporary_failure"}
    assert telegram.calls() == []
    assert _claim(telegram, update) == ("processing", 0)

    clock.advance(seconds=1)
    webhook.deliver_ok(update)

    assert _claim(telegram, update) == ("processed", 1)
    assert _copies_in_topic(telegram, "hello") == 1


def test_a_retryable_failure_leaves_the_claim_processing(webhook, telegram, user, verified):
    update = telegram.private_message(user, text="hello")
    telegram.fail("sendMessage", status=502)

    response = webhook.deliver(update)

    assert response.status_code == 500
    assert _claim(telegram, update) == ("processing", 0)
    assert RelayedMessage.objects.count() == 0


def test_poison_after_max_attempts_is_marked_failed_and_acknowledged(
    webhook, telegram, user, verified, clock
):
    update = telegram.private_message(user, text="hello")
    # A persistent 429 asking for 30 s: never waited for in place, so every delivery fails.
    telegram.fail("createForumTopic", status=429, retry_after=30, times=100)

    statuses = []
    for _ in range(3):
        statuses.append(webhook.deliver(update).status_code)
        clock.advance(seconds=61)
    assert statuses == [500, 500, 500]
    assert len(telegram.calls("createForumTopic")) == 3
    assert _claim(telegram, update) == ("processing", 2)

    response = webhook.deliver(update)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert _claim(telegram, update) == ("failed", 3)
    assert len(telegram.calls("createForumTopic")) == 3  # the poison attempt calls nothing

    clock.advance(seconds=61)
    webhook.deliver_ok(update)  # failed is final: a duplicate from now on
    assert len(telegram.calls()) == 3
    assert _claim(telegram, update) == ("failed", 3)


def test_max_attempts_is_configurable(webhook, bot_settings, telegram, user, verified, clock):
    bot_settings.MAX_ATTEMPTS = "1"
    update = telegram.private_message(user, text="hello")
    telegram.fail("createForumTopic", status=500, times=10)

    assert webhook.deliver(update).status_code == 500
    clock.advance(seconds=61)
    webhook.deliver_ok(update)

    assert _claim(telegram, update) == ("failed", 1)


# ------------------------------------------------------------------ a fault at every call


def _new_topic_for_a_risky_user(telegram, user, clock):
    make_user(user, bot_id=telegram.bot.id, now=clock.now, is_risk=True)
    return telegram.private_message(user, text="hello")


def _closed_topic_and_a_new_name(telegram, user, clock, webhook):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="first"))
    thread_id = Topic.objects.get().thread_id
    admin = telegram.user(111111111, "Alice")
    webhook.deliver_ok(telegram.close_topic_by_hand(thread_id, by=admin))
    clock.advance(minutes=5)
    user.first_name = "Robert"
    return telegram.private_message(user, text="hello")


# Each scenario's Bot API calls, in order; a fault is injected at each of them in turn.
SCENARIOS = {
    "new topic": (
        _new_topic_for_a_risky_user,
        ["createForumTopic", "sendMessage", "pinChatMessage", "sendMessage", "sendMessage"],
    ),
    "closed topic": (
        _closed_topic_and_a_new_name,
        ["reopenForumTopic", "editMessageText", "sendMessage"],
    ),
}
FAULT_CASES = [
    (name, call_number)
    for name, (_, methods) in SCENARIOS.items()
    for call_number in range(1, len(methods) + 1)
]


def _prepare(name, telegram, user, clock, webhook):
    build, _ = SCENARIOS[name]
    if name == "closed topic":
        return build(telegram, user, clock, webhook)
    return build(telegram, user, clock)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_makes_exactly_the_listed_calls(name, webhook, telegram, user, clock):
    update = _prepare(name, telegram, user, clock, webhook)
    telegram.forget_calls()

    webhook.deliver_ok(update)

    assert telegram.methods() == SCENARIOS[name][1]
    assert _copies_in_topic(telegram, "hello") == 1


@pytest.mark.parametrize(("name", "call_number"), FAULT_CASES)
def test_a_retryable_fault_at_any_call_ends_with_exactly_one_relayed_copy(
    name, call_number, webhook, telegram, user, clock
):
    update = _prepare(name, telegram, user, clock, webhook)
    telegram.forget_calls()
    telegram.fail_call(call_number, status=500)
    best_effort = SCENARIOS[name][1][call_number - 1] in ("editMessageText", "pinChatMessage") or (
        name == "new topic" and call_number == 5  # the risk reminder after the relay
    )

    first = webhook.deliver(update)
    clock.advance(seconds=61)
    second = webhook.deliver(update)

    if best_effort:
        assert first.status_code == 200
    else:
        assert first.status_code == 500
    assert second.status_code == 200
    assert _copies_in_topic(telegram, "hello") == 1
    assert RelayedMessage.objects.filter(direction="in", content_type="text").count() == (
        1 if name == "new topic" else 2
    )
    assert _claim(telegram, update)[0] == "processed"
    topic = Topic.objects.get()
    assert topic.status == "open"
    # Exactly one card in the topic, and it is the one the topic points to.
    cards = [
        message
        for message in telegram.topic_messages(topic.thread_id)
        if str(user.id) in (message.text or "") and message.text != "hello"
    ]
    if name == "new topic":
        assert [card.message_id for card in cards] == [topic.pinned_msg_id]


def test_a_dropped_connection_is_retried_by_redelivery(webhook, telegram, user, verified, clock):
    update = telegram.private_message(user, text="hello")
    telegram.fail("sendMessage", mode="disconnect")

    assert webhook.deliver(update).status_code == 500
    clock.advance(seconds=61)
    webhook.deliver_ok(update)

    assert _copies_in_topic(telegram, "hello") == 1


# ------------------------------------------------------------------ concurrency and the ledger


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_deliveries_of_one_update_process_it_once(
    bot_settings, bot_row, clock, telegram, user
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="hello")
    hold = telegram.hold("createForumTopic")
    first_response = {}

    def deliver_first() -> None:
        try:
            first_response["response"] = Webhook(Client()).deliver(update)
        finally:
            connections.close_all()

    first = threading.Thread(target=deliver_first)
    first.start()
    try:
        assert hold.wait_until_arrived(10)
        second = Webhook(Client()).deliver(update)
    finally:
        hold.release()
        first.join(30)

    assert second.status_code == 500
    assert second.json() == {"error": "temporary_failure"}
    assert first_response["response"].status_code == 200
    assert telegram.methods().count("createForumTopic") == 1
    assert _copies_in_topic(telegram, "hello") == 1
    assert _claim(telegram, update) == ("processed", 0)


@pytest.fixture
def failing_ledger():
    """A real database fault: inserting into the ledger raises until the trigger is dropped."""
    with connection.cursor() as cursor:
        cursor.execute(
            "create function refuse_ledger() returns trigger language plpgsql as "
            "$$ begin raise exception 'ledger unavailable'; end $$"
        )
        cursor.execute(
            "create trigger refuse_ledger before insert on messages "
            "for each row execute function refuse_ledger()"
        )

    def heal() -> None:
        with connection.cursor() as cursor:
            cursor.execute("drop trigger if exists refuse_ledger on messages")
            cursor.execute("drop function if exists refuse_ledger()")

    yield heal
    heal()


@pytest.mark.django_db(transaction=True)
def test_a_ledger_failure_is_never_marked_processed_early(
    bot_settings, bot_row, clock, telegram, user, failing_ledger
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook = Webhook(Client())
    update = telegram.private_message(user, text="hello")

    response = webhook.deliver(update)

    assert response.status_code == 500
    assert _claim(telegram, update) == ("processing", 0)
    assert RelayedMessage.objects.count() == 0

    failing_ledger()
    clock.advance(seconds=61)
    webhook.deliver_ok(update)

    # The accepted at-least-once cost: the relay had happened before the ledger failed.
    assert _copies_in_topic(telegram, "hello") == 2
    assert RelayedMessage.objects.count() == 1
    assert _claim(telegram, update) == ("processed", 1)


def test_the_body_is_read_as_telegram_sends_it(client, webhook, telegram, user, verified):
    update = telegram.private_message(user, text="héllo ✓")

    response = client.post(
        "/telegram/webhook",
        data=json.dumps(update, ensure_ascii=False).encode(),
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
    )

    assert response.status_code == 200
    assert _copies_in_topic(telegram, "héllo ✓") == 1
