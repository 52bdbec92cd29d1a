"""The webhook under database trouble.

Text PostgreSQL cannot store (a NUL character, half of a surrogate pair) arrives from Telegram
like any other: the webhook replaces it with U+FFFD once, so such a user is relayed instead of
being refused by every write and redelivered until the update is dropped as poison. And pooled
connections killed by the server are replaced, not used.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test import Client

from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import Webhook
from tests.bots.helpers import make_user, topic_texts, user_row
from tests.database_faults import fill_django_pool, terminate_connections

NUL = "\x00"
LONE_SURROGATE = "\ud83d"  # the first half of 😀 without its second half
REPLACED = "\ufffd"


def test_a_user_named_with_a_nul_gets_a_topic_and_is_relayed(webhook, telegram, clock):
    person = telegram.user(5101, f"Bo{NUL}b", last_name=f"Lee{LONE_SURROGATE}", username="bob")
    make_user(
        telegram.user(5101, "Bob", username="bob"), bot_id=telegram.bot.id, now=clock.now
    )  # a returning, verified user who renamed themselves
    update = telegram.private_message(person, text=f"hello{NUL} there")

    webhook.deliver_ok(update)

    stored = user_row(telegram, person)
    assert (stored.first_name, stored.last_name) == (f"Bo{REPLACED}b", f"Lee{REPLACED}")
    topic = Topic.objects.get()
    assert topic.title == f"Bo{REPLACED}b"
    assert telegram.topic(topic.thread_id).name == topic.title
    assert RelayedMessage.objects.get().private_msg_id == update["message"]["message_id"]
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"


def test_a_new_user_named_with_a_nul_is_registered_and_challenged(webhook, telegram, clock):
    person = telegram.user(5102, f"{NUL}{NUL}")

    webhook.deliver_ok(telegram.private_message(person, text="hi"))

    stored = BotUser.objects.get(user_id=5102)
    assert stored.first_name == REPLACED * 2
    assert stored.is_verified is False
    assert telegram.bot_messages(person.id), "the new user got no welcome or challenge"


def test_a_caption_and_a_note_with_a_nul_are_stored(webhook, telegram, user, admin, clock):
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook.deliver_ok(telegram.private_message(user, photo="photo-1", caption=f"see{NUL}this"))
    topic = Topic.objects.get()

    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=topic.thread_id, text=f"/note V{NUL}IP")
    )

    assert Topic.objects.get().note == f"V{REPLACED}IP"
    assert RelayedMessage.objects.get(direction="in").content_type == "photo"
    assert topic_texts(telegram, topic.thread_id)[0] is not None  # the card still renders


@pytest.mark.django_db(transaction=True)
def test_the_webhook_works_on_after_its_database_connections_are_terminated(
    bot_settings, bot_row, clock, telegram, user
):
    """A failover or idle-timeout kills every pooled connection; the next update is handled on
    a fresh one instead of failing (and being redelivered) on a dead one."""
    make_user(user, bot_id=telegram.bot.id, now=clock.now)
    webhook = Webhook(Client())
    webhook.deliver_ok(telegram.private_message(user, text="before"))
    connections.close_all()  # what the end of a request does (back to the pool)
    fill_django_pool(6)  # more dead connections than psycopg_pool's own check survives
    assert terminate_connections(settings.DATABASES["default"], connection.settings_dict["NAME"])

    webhook.deliver_ok(telegram.private_message(user, text="after"))

    assert topic_texts(telegram, Topic.objects.get().thread_id)[1:] == ["before", "after"]
    assert set(ProcessedUpdate.objects.values_list("status", flat=True)) == {"processed"}
