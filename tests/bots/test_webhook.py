"""The webhook's idempotency and status map (spec §6, issue 36), end to end over HTTP.

Every update is stored in the inbox before it is answered: what the webhook cannot finish is
finished by the inbox's worker (``inbox.drain()``, the Celery task's body run here), not by
Telegram's redelivery. These tests deliver an update, move the clock and run the worker; a
redelivery is only ever a duplicate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import connection
from django.test import Client

from bots.models import BotUser, InboxUpdate, ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import WEBHOOK_SECRET, Clock, Inbox, Webhook, deliver_during_held_call
from tests.bots.helpers import make_user
from tests.fakes.telegram import FakeTelegram, FakeUser

BUSINESS_TABLES = (BotUser, Topic, RelayedMessage, ProcessedUpdate, InboxUpdate)


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


def test_a_retryable_failure_is_answered_200_and_finished_by_the_worker_after_its_back_off(
    webhook, telegram, user, verified, clock, inbox, queued_drains
):
    update = telegram.private_message(user, text="hello")
    telegram.fail("createForumTopic", status=500)

    response = webhook.deliver(update)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert _claim(telegram, update) == ("processing", 1)  # one failed attempt
    assert inbox.waiting() == [update["update_id"]]
    assert RelayedMessage.objects.count() == 0
    # The worker is nudged for when the row is due again: 60 s after the failure (the time
    # Telegram's redelivery took before, spec §6).
    assert [countdown for _, _, countdown in queued_drains.sent] == [60.0]
    telegram.forget_calls()

    webhook.deliver_ok(update)  # a redelivery meanwhile is a duplicate: nothing is done
    assert inbox.later(seconds=59) == 0  # not due yet
    assert telegram.calls() == []

    assert inbox.later(seconds=1) == 1

    assert _claim(telegram, update) == ("processed", 1)
    assert inbox.waiting() == []
    assert _copies_in_topic(telegram, "hello") == 1
    webhook.deliver_ok(update)
    assert _copies_in_topic(telegram, "hello") == 1


def test_poison_after_max_attempts_is_marked_failed(webhook, telegram, user, verified, inbox):
    update = telegram.private_message(user, text="hello")
    telegram.fail("createForumTopic", status=502, times=100)

    webhook.deliver_ok(update)  # attempt 0 fails; due again in a minute
    assert inbox.later(seconds=60) == 1  # attempt 1 fails; due again in a minute
    assert inbox.later(seconds=60) == 1  # attempt 2 fails; due again in 2 minutes
    assert len(telegram.calls("createForumTopic")) == 3
    assert _claim(telegram, update) == ("processing", 3)

    assert inbox.later(seconds=119) == 0
    assert inbox.later(seconds=1) == 1  # the fourth attempt is declared poison, calls nothing

    assert _claim(telegram, update) == ("failed", 3)
    assert inbox.waiting() == []
    assert len(telegram.calls("createForumTopic")) == 3
    webhook.deliver_ok(update)  # failed is final: a duplicate from now on
    assert len(telegram.calls()) == 3


def test_max_attempts_is_configurable(webhook, bot_settings, telegram, user, verified, inbox):
    bot_settings.MAX_ATTEMPTS = "1"
    update = telegram.private_message(user, text="hello")
    telegram.fail("createForumTopic", status=500, times=10)

    webhook.deliver_ok(update)
    inbox.later(seconds=60)

    assert _claim(telegram, update) == ("failed", 1)
    assert len(telegram.calls("createForumTopic")) == 1


def test_a_long_429_is_waited_out_and_never_counted_toward_poison(
    webhook, telegram, user, verified, inbox, clock
):
    update = telegram.private_message(user, text="hello")
    # Telegram asks for 30 s, four times in a row: never waited for in place (over 3 s).
    telegram.fail("createForumTopic", status=429, retry_after=30, times=4)

    webhook.deliver_ok(update)
    for _ in range(3):
        assert inbox.later(seconds=29) == 0  # honoured: nothing before the 30 s
        clock.limiter_forgets(seconds=30)  # the limiter learned the 30 s too
        assert inbox.later(seconds=1) == 1

    assert _claim(telegram, update) == ("processing", 0)  # pacing is not failing
    assert inbox.later(seconds=30) == 1
    assert _claim(telegram, update) == ("processed", 0)
    assert _copies_in_topic(telegram, "hello") == 1
    assert [call.status for call in telegram.calls("createForumTopic")] == [429] * 4 + [200]


# ------------------------------------------------------------------ a fault at every call


def _open_conversation(
    telegram: FakeTelegram, user: FakeUser, clock: Clock, webhook: Webhook, note: str | None = None
) -> None:
    """A verified user's first message ("first"): topic, card, one ledger row."""
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="first"))
    Topic.objects.update(note=note)


def _new_topic_for_a_risky_user(
    telegram: FakeTelegram, user: FakeUser, clock: Clock, webhook: Webhook
) -> dict:
    make_user(user, bot_id=telegram.bot.id, now=clock.now, is_risk=True)
    return telegram.private_message(user, text="hello")


def _closed_topic_and_a_new_name(
    telegram: FakeTelegram, user: FakeUser, clock: Clock, webhook: Webhook
) -> dict:
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="first"))
    thread_id = Topic.objects.get().thread_id
    admin = telegram.user(111111111, "Alice")
    webhook.deliver_ok(telegram.close_topic_by_hand(thread_id, by=admin))
    clock.advance(minutes=5)
    user.first_name = "Robert"
    return telegram.private_message(user, text="hello")


def _topic_deleted_by_hand(
    telegram: FakeTelegram, user: FakeUser, clock: Clock, webhook: Webhook
) -> dict:
    """Self-heal (spec §2.9): the relay finds "message thread not found"."""
    _open_conversation(telegram, user, clock, webhook, note="lost with the topic")
    telegram.delete_topic_by_hand(Topic.objects.get().thread_id)
    clock.advance(minutes=5)
    return telegram.private_message(user, text="hello")


def _closed_topic_deleted_by_hand(
    telegram: FakeTelegram, user: FakeUser, clock: Clock, webhook: Webhook
) -> dict:
    """The reopen of a closed binding finds the topic gone (spec §2.6): replaced."""
    _open_conversation(telegram, user, clock, webhook, note="lost with the topic")
    thread_id = Topic.objects.get().thread_id
    webhook.deliver_ok(telegram.close_topic_by_hand(thread_id, by=telegram.user(111111111)))
    telegram.delete_topic_by_hand(thread_id)
    clock.advance(minutes=5)
    return telegram.private_message(user, text="hello")


def _topic_closed_unnoticed(
    telegram: FakeTelegram, user: FakeUser, clock: Clock, webhook: Webhook
) -> dict:
    """TOPIC_CLOSED on a binding the database thinks open (spec §2.9): reopen, resend once."""
    _open_conversation(telegram, user, clock, webhook)
    telegram.close_topic_by_hand(Topic.objects.get().thread_id, by=telegram.user(111111111))
    clock.advance(minutes=5)
    return telegram.private_message(user, text="hello")


@dataclass(frozen=True)
class Scenario:
    build: Callable[[FakeTelegram, FakeUser, Clock, Webhook], dict]
    calls: list[str]  # the Bot API calls of the update, in order, when nothing fails
    replaces_topic: bool = False  # the update ends in a new topic (the old one is gone)


# A fault is injected at each scenario's calls in turn.
SCENARIOS = {
    "new topic": Scenario(
        _new_topic_for_a_risky_user,
        ["createForumTopic", "sendMessage", "pinChatMessage", "sendMessage", "sendMessage"],
    ),
    "closed topic": Scenario(
        _closed_topic_and_a_new_name,
        ["reopenForumTopic", "editMessageText", "sendMessage"],
    ),
    "deleted topic": Scenario(
        _topic_deleted_by_hand,
        # relay (thread not found), replacement, its card, pin, the one resend
        ["sendMessage", "createForumTopic", "sendMessage", "pinChatMessage", "sendMessage"],
        replaces_topic=True,
    ),
    "closed then deleted topic": Scenario(
        _closed_topic_deleted_by_hand,
        # reopen (TOPIC_ID_INVALID), replacement, its card, pin, the relay
        ["reopenForumTopic", "createForumTopic", "sendMessage", "pinChatMessage", "sendMessage"],
        replaces_topic=True,
    ),
    "topic closed unnoticed": Scenario(
        _topic_closed_unnoticed,
        ["sendMessage", "reopenForumTopic", "sendMessage"],  # TOPIC_CLOSED, reopen, resend
    ),
}
FAULT_CASES = [
    (name, call_number)
    for name, scenario in SCENARIOS.items()
    for call_number in range(1, len(scenario.calls) + 1)
]


def _is_best_effort(name: str, call_number: int) -> bool:
    """Card edits and pins are best effort (spec §2.7), and so is the risk reminder after the
    relay (spec §2.10): a fault there is logged and the update still answers 200."""
    method = SCENARIOS[name].calls[call_number - 1]
    return method in ("editMessageText", "pinChatMessage") or (
        name == "new topic" and call_number == 5
    )


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_makes_exactly_the_listed_calls(
    name: str, webhook: Webhook, telegram: FakeTelegram, user: FakeUser, clock: Clock
) -> None:
    update = SCENARIOS[name].build(telegram, user, clock, webhook)
    telegram.forget_calls()

    webhook.deliver_ok(update)

    assert telegram.methods() == SCENARIOS[name].calls
    assert _copies_in_topic(telegram, "hello") == 1


@pytest.mark.parametrize(("name", "call_number"), FAULT_CASES)
def test_a_retryable_fault_at_any_call_ends_with_exactly_one_relayed_copy(
    name: str,
    call_number: int,
    webhook: Webhook,
    telegram: FakeTelegram,
    user: FakeUser,
    clock: Clock,
    inbox: Inbox,
) -> None:
    scenario = SCENARIOS[name]
    update = scenario.build(telegram, user, clock, webhook)
    original = Topic.objects.first()  # None: the user has no topic yet
    telegram.forget_calls()
    telegram.fail_call(call_number, status=500)

    webhook.deliver_ok(update)

    if _is_best_effort(name, call_number):
        assert inbox.waiting() == []  # logged and done
    else:
        assert inbox.waiting() == [update["update_id"]]
    assert inbox.later(seconds=60) == (0 if _is_best_effort(name, call_number) else 1)
    webhook.deliver_ok(update)  # Telegram's redelivery, were it to come: a duplicate
    assert inbox.waiting() == []
    assert _copies_in_topic(telegram, "hello") == 1
    assert RelayedMessage.objects.filter(direction="in", content_type="text").count() == (
        1 if original is None else 2
    )
    assert _claim(telegram, update)[0] == "processed"
    topic = Topic.objects.get()
    assert topic.status == "open"
    assert BotUser.objects.get(user_id=user.id).status == "active"
    live_topics = [fake.thread_id for fake in telegram.topics() if not fake.deleted]
    assert live_topics == [topic.thread_id]  # no stray topic from a retried creation
    if scenario.replaces_topic:
        assert topic.thread_id != original.thread_id
        assert topic.note is None  # the note went with the deleted topic
    # Exactly one card in the topic, and it is the one the topic points to (pinned unless the
    # best-effort pin was the fault).
    cards = [
        message
        for message in telegram.topic_messages(topic.thread_id)
        if str(user.id) in (message.text or "") and message.text != "hello"
    ]
    assert [card.message_id for card in cards] == [topic.pinned_msg_id]
    # ...and it shows the name the user has now, even when the attempt that stored a new name
    # failed before it reached the card ("closed topic": the user renamed themselves) — unless
    # the fault hit the card edit itself, which is best effort (spec §2.7).
    if scenario.calls[call_number - 1] != "editMessageText":
        assert cards[0].text.splitlines()[0] == f"昵称：{user.first_name} (@{user.username})"
    pin_failed = scenario.calls[call_number - 1] == "pinChatMessage"
    assert telegram.pinned() == ([] if pin_failed else [topic.pinned_msg_id])
    ledger = RelayedMessage.objects.order_by("id").last()
    assert (ledger.thread_id, ledger.private_msg_id) == (
        topic.thread_id,
        update["message"]["message_id"],
    )
    assert telegram.message(telegram.support_chat_id, ledger.group_msg_id).text == "hello"


def test_a_dropped_connection_is_retried_by_the_worker(webhook, telegram, user, verified, inbox):
    update = telegram.private_message(user, text="hello")
    telegram.fail("sendMessage", mode="disconnect")

    webhook.deliver_ok(update)
    assert _copies_in_topic(telegram, "hello") == 0
    inbox.later(seconds=60)

    assert _copies_in_topic(telegram, "hello") == 1


# ------------------------------------------------------------------ concurrency and the ledger


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_deliveries_of_one_update_process_it_once(
    bot_settings, bot_row, clock, telegram, user
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="hello")
    first, second = deliver_during_held_call(telegram, "createForumTopic", update, update)

    # The second finds the update stored (the first holds its lease): nothing to do.
    assert second.status_code == 200
    assert first.status_code == 200
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
    bot_settings, bot_row, clock, telegram, user, failing_ledger, inbox
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook = Webhook(Client())
    update = telegram.private_message(user, text="hello")

    webhook.deliver_ok(update)

    assert _claim(telegram, update) == ("processing", 1)
    assert inbox.waiting() == [update["update_id"]]
    assert RelayedMessage.objects.count() == 0

    failing_ledger()
    inbox.later(seconds=60)

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


# ------------------------------------------------------------------ the hot path's statements


@pytest.mark.django_db(transaction=True)
def test_a_returning_user_s_update_costs_at_most_nine_statements_as_the_web_process_runs_it(
    webhook, telegram, user, clock
):
    """Issue 23's budget, counted as the web process runs the view: autocommit (no test
    transaction around it), every statement the connection executes — the bot, the
    conversation's lock and the claim written with the inbox row (issue 36: one transaction
    before the answer; the lock orders two updates of one user), the user, the switches, the
    rate count, the binding, the ledger row, the row deleted with the claim settled.
    (test_topics_and_relay counts the same path inside the test's transaction.)"""
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="hello"))  # topic and card exist now
    clock.advance(seconds=5)
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        webhook.deliver_ok(telegram.private_message(user, text="again"))

    assert len(statements) <= 9, statements
    assert not any(sql.lstrip().upper().startswith("SAVEPOINT") for sql in statements)
    assert [message.text for message in telegram.topic_messages(Topic.objects.get().thread_id)][
        1:
    ] == ["hello", "again"]
