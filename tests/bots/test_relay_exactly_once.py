"""A user's message reaches the topic once, even when what follows its relay fails.

Found by ``make drill`` (issue 22): with the database's connections terminated mid-storm, a
message whose relay had succeeded met a dead connection at its ledger row, the update was
answered 500, and its redelivery relayed the message a second time; a topic created just before
the connections died lost its binding and the redelivery created a second topic. And a web
process killed after the ledger row but before the update was marked processed left a claim
whose take-over relayed the message again.
"""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test import Client

from bots.models import ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import Webhook, deliver_during_held_call
from tests.bots.helpers import make_user, topic_texts
from tests.database_faults import terminate_connections


def _deliver_while_connections_die(telegram, method: str, update: dict):
    """Deliver ``update`` in a thread; when its ``method`` call reaches Telegram, terminate
    every connection of the test database (a failover), then let the call answer."""
    hold = telegram.hold(method)
    answers = {}

    def deliver() -> None:
        try:
            answers["response"] = Webhook(Client()).deliver(update)
        finally:
            connections.close_all()

    delivery = threading.Thread(target=deliver)
    delivery.start()
    try:
        assert hold.wait_until_arrived(10), f"{method} never reached Telegram"
        connections.close_all()
        assert terminate_connections(
            settings.DATABASES["default"], connection.settings_dict["NAME"]
        )
    finally:
        hold.release()
        delivery.join(30)
    return answers["response"]


@pytest.mark.django_db(transaction=True)
def test_a_relay_whose_connection_dies_is_recorded_and_not_relayed_again(
    bot_settings, bot_row, clock, telegram, user
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    Webhook(Client()).deliver_ok(telegram.private_message(user, text="first"))
    update = telegram.private_message(user, text="second")

    response = _deliver_while_connections_die(telegram, "sendMessage", update)

    assert response.status_code == 200, response.content
    clock.advance(seconds=61)
    Webhook(Client()).deliver_ok(update)  # Telegram's redelivery, had it not seen the 200
    assert topic_texts(telegram, Topic.objects.get().thread_id)[1:] == ["first", "second"]
    assert RelayedMessage.objects.filter(direction="in").count() == 2
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"


@pytest.mark.django_db(transaction=True)
def test_a_topic_created_as_the_connections_die_stays_the_users_one_topic(
    bot_settings, bot_row, clock, telegram, user
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="hello")

    response = _deliver_while_connections_die(telegram, "createForumTopic", update)

    assert response.status_code == 200, response.content
    clock.advance(seconds=61)
    Webhook(Client()).deliver_ok(update)
    [topic] = [topic for topic in telegram.topics() if not topic.deleted]
    assert Topic.objects.get().thread_id == topic.thread_id
    assert topic_texts(telegram, topic.thread_id)[1:] == ["hello"]


def test_a_claim_taken_over_after_the_ledger_row_does_not_relay_again(
    webhook, telegram, user, clock
):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="only once")
    webhook.deliver_ok(update)
    # What a web process SIGKILLed after the ledger row, before marking the update, leaves.
    ProcessedUpdate.objects.filter(update_id=update["update_id"]).update(status="processing")
    clock.advance(seconds=61)

    webhook.deliver_ok(update)

    assert topic_texts(telegram, Topic.objects.get().thread_id)[1:] == ["only once"]
    assert RelayedMessage.objects.filter(direction="in").count() == 1
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"


@pytest.mark.django_db(transaction=True)
def test_the_race_loser_deletes_its_topic_through_a_failing_call(
    bot_settings, bot_row, clock, telegram, user
):
    """Found by make drill: the loser's deleteForumTopic met a 502 and the user kept an empty
    second topic (nothing else knows its id to delete it later)."""
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    telegram.fail("deleteForumTopic", status=502)

    first, second = deliver_during_held_call(
        telegram,
        "createForumTopic",
        telegram.private_message(user, text="first"),
        telegram.private_message(user, text="second"),
    )

    assert first.status_code == second.status_code == 200
    assert [topic.thread_id for topic in telegram.topics() if not topic.deleted] == [
        Topic.objects.get().thread_id
    ]
