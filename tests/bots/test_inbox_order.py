"""One conversation's updates in Telegram's order, both ways, and each relayed once (issue 36).

While a conversation has updates waiting in the inbox — or an album being collected — its next
updates queue behind them instead of being handled at once: an album then a text arrives as
the album then the text (the album is sent by its flush, run here as the Celery task's body,
which nudges the inbox's worker, ``inbox.drain()``), a user's message during a long
/wipealldata comes in after it, and a take-over of an attempt that had relayed an admin's reply
sends nothing again.
"""

from __future__ import annotations

import pytest
from celery import current_app as celery_current_app

from bots import texts
from bots.models import AlbumItem, InboxUpdate, ProcessedUpdate, RelayedMessage, Topic
from bots.pipeline import albums, bulk
from bots.pipeline.albums import flush_album
from bots.tasks import wipe_continue_task
from tests.bots.helpers import (
    deletes_refused,
    dm_texts,
    group_click,
    open_conversation,
    set_switches,
    topic_texts,
)
from tests.bots.test_albums import QueuedTasks


@pytest.fixture
def flushes(monkeypatch) -> QueuedTasks:
    """The album flushes queued (Celery's broker stands aside: the test runs the flush)."""
    tasks = QueuedTasks()
    monkeypatch.setattr(albums, "current_app", tasks)
    return tasks


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def _deliver(webhook, updates, capture) -> None:
    # The album's flush is queued when its item's row commits.
    with capture(execute=True):
        for update in updates:
            webhook.deliver_ok(update)


def _claims(updates) -> list[str]:
    return [ProcessedUpdate.objects.get(update_id=update["update_id"]).status for update in updates]


# ------------------------------------------------------------------ albums


def test_a_users_album_then_a_text_arrive_in_the_topic_as_the_album_then_the_text(
    webhook, telegram, user, topic, clock, inbox, flushes, django_capture_on_commit_callbacks
):
    """The original relayed the text at once while the album's items waited ~1.5 s for a
    worker: the admins saw the text before the photos it was about."""
    album = [telegram.private_message(user, photo=f"p{n}", media_group_id="g1") for n in (1, 2)]
    text = telegram.private_message(user, text="the two photos above")
    telegram.forget_calls()

    _deliver(webhook, [*album, text], django_capture_on_commit_callbacks)

    # The items are collected (the album's flush comes later); the text waits behind them.
    assert telegram.calls() == []
    assert AlbumItem.objects.count() == 2
    assert inbox.waiting() == [text["update_id"]]
    assert inbox.drain() == 0  # not even the worker may relay it before the album

    clock.advance(seconds=2)
    assert flush_album(bot_id=telegram.bot.id, media_group_id="g1") == "sent"
    assert inbox.drain() == 1  # the flush nudged the worker: the text goes now

    assert [call.method for call in telegram.calls()] == ["sendMediaGroup", "sendMessage"]
    relayed = telegram.topic_messages(topic.thread_id)[2:]  # after the card and "hello"
    assert [(message.kind, message.file_id, message.text) for message in relayed] == [
        ("photo", "p1", None),
        ("photo", "p2", None),
        ("text", None, "the two photos above"),
    ]
    assert _claims([*album, text]) == ["processed"] * 3
    assert inbox.waiting() == []


def test_an_admins_album_then_reply_reach_the_user_as_the_album_then_the_reply(
    webhook,
    telegram,
    user,
    admin,
    topic,
    clock,
    inbox,
    flushes,
    django_capture_on_commit_callbacks,
):
    album = [
        telegram.group_message(
            admin, thread_id=topic.thread_id, document=f"d{n}", media_group_id="g2"
        )
        for n in (1, 2)
    ]
    reply = telegram.group_message(admin, thread_id=topic.thread_id, text="both signed, please")
    telegram.forget_calls()

    _deliver(webhook, [*album, reply], django_capture_on_commit_callbacks)

    assert telegram.calls() == []
    assert inbox.waiting() == [reply["update_id"]]
    clock.advance(seconds=2)
    assert flush_album(bot_id=telegram.bot.id, media_group_id="g2") == "sent"
    inbox.drain()

    received = telegram.bot_messages(user.id)
    assert [(message.kind, message.file_id, message.text) for message in received] == [
        ("document", "d1", None),
        ("document", "d2", None),
        ("text", None, "both signed, please"),
    ]
    assert RelayedMessage.objects.filter(direction="out").count() == 3


def test_a_second_album_waits_for_the_first_but_its_own_items_do_not(
    webhook, telegram, user, topic, clock, inbox, flushes, django_capture_on_commit_callbacks
):
    first = [telegram.private_message(user, photo=f"a{n}", media_group_id="ga") for n in (1, 2)]
    second = [telegram.private_message(user, photo=f"b{n}", media_group_id="gb") for n in (1, 2)]
    telegram.forget_calls()

    _deliver(webhook, [*first, *second], django_capture_on_commit_callbacks)

    assert list(AlbumItem.objects.values_list("media_group_id", flat=True)) == ["ga", "ga"]
    assert inbox.waiting() == [update["update_id"] for update in second]
    clock.advance(seconds=2)
    assert flush_album(bot_id=telegram.bot.id, media_group_id="ga") == "sent"
    with django_capture_on_commit_callbacks(execute=True):
        assert inbox.drain() == 2  # the second album's items, collected together
    clock.advance(seconds=2)
    assert flush_album(bot_id=telegram.bot.id, media_group_id="gb") == "sent"

    assert [len(call.params["media"]) for call in telegram.calls("sendMediaGroup")] == [2, 2]
    relayed = telegram.topic_messages(topic.thread_id)[2:]
    assert [message.file_id for message in relayed] == ["a1", "a2", "b1", "b2"]


# ------------------------------------------------------------------ behind a waiting update


def test_a_users_later_messages_and_the_admins_reply_queue_behind_a_waiting_one(
    bot_settings, webhook, telegram, user, admin, topic, clock, inbox
):
    """The group has no room this minute: the user's message waits in the inbox. What comes
    after it in the conversation — the user's next message, an admin's reply that needs no
    room in the group at all — waits behind it, and all go in Telegram's order."""
    bot_settings.TELEGRAM_GROUP_SENDS_PER_WINDOW = "3"  # the fixture's card, pin and "hello"
    bot_settings.TELEGRAM_SEND_BUDGET_MS = "200"
    first = telegram.private_message(user, text="first")
    second = telegram.private_message(user, text="second")
    reply = telegram.group_message(admin, thread_id=topic.thread_id, text="on it")
    telegram.forget_calls()

    for update in (first, second, reply):
        webhook.deliver_ok(update)

    assert telegram.calls() == []
    assert inbox.waiting() == [first["update_id"], second["update_id"], reply["update_id"]]
    inbox.later(seconds=90)  # the group's minute has passed (its keys with it)

    assert [(call.params["chat_id"], call.params["text"]) for call in telegram.calls()] == [
        (telegram.support_chat_id, "first"),
        (telegram.support_chat_id, "second"),
        (user.id, "on it"),
    ]
    assert inbox.waiting() == []


# ------------------------------------------------------------------ a long wipe


def test_a_users_message_during_a_long_wipe_is_relayed_after_it_once(
    webhook, telegram, admin, user, topic, clock, inbox, monkeypatch
):
    """The wipe deletes every bound topic, then the rows; a message arriving meanwhile would
    be relayed into a topic about to go (and lost with it) or get a topic the wipe's row delete
    leaves unbound. It waits in the inbox (not for Telegram's redelivery: the original answered
    500), and once the wipe is over it comes in as a stranger's first message — relayed once."""
    set_switches(verify_enabled="0")  # a stranger's message is relayed without a challenge
    other = telegram.user(7801, "Olga")
    open_conversation(webhook, telegram, other, bot_id=telegram.bot.id, now=clock.now)
    chunks = []
    monkeypatch.setattr(
        celery_current_app, "send_task", lambda name, kwargs, **options: chunks.append(kwargs)
    )
    monkeypatch.setattr(bulk, "INLINE_BUDGET_SECONDS", 0.0)  # every topic in the worker
    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=topic.thread_id, text="/wipealldata")
    )
    [warning] = [m for m in telegram.topic_messages(topic.thread_id) if m.reply_markup]
    confirm = warning.reply_markup["inline_keyboard"][0][0]["callback_data"]
    webhook.deliver_ok(group_click(telegram, admin, warning.message_id, confirm))
    [chunk] = chunks  # the wipe runs on in the worker
    message = telegram.private_message(user, text="are you still there?")
    telegram.forget_calls()

    webhook.deliver_ok(message)
    assert inbox.later(seconds=5) == 1  # tried again: the wipe still runs

    assert telegram.calls() == []
    assert inbox.waiting() == [message["update_id"]]
    assert wipe_continue_task(**chunk) == texts.wipe_done()
    assert Topic.objects.count() == 0
    inbox.later(seconds=5)

    [fresh] = Topic.objects.all()
    assert fresh.user_id == user.id and fresh.thread_id != topic.thread_id
    assert topic_texts(telegram, fresh.thread_id)[1:] == ["are you still there?"]
    sent = [call.params.get("text") for call in telegram.calls("sendMessage") if call.ok]
    assert sent.count("are you still there?") == 1
    assert RelayedMessage.objects.filter(user_id=user.id).count() == 1
    assert _claims([message]) == ["processed"]


# ------------------------------------------------------------------ take-overs


@pytest.mark.django_db(transaction=True)
def test_a_take_over_after_the_outbound_ledger_row_sends_nothing_again(
    bot_settings, bot_row, clock, webhook, telegram, user, admin, topic, inbox
):
    """The admin's reply was relayed and its ledger row written, then its holder died before
    the row was finished (here: PostgreSQL refused the inbox row's delete). A worker takes the
    row over once its lease lapsed: the ledger records the reply, so nothing is sent again
    (an outside probe had seen the user receive one reply twice)."""
    reply = telegram.group_message(
        admin, thread_id=topic.thread_id, text="your refund is on its way"
    )
    telegram.forget_calls()

    with deletes_refused("update_inbox"):
        webhook.deliver_ok(reply)

    assert dm_texts(telegram, user) == ["your refund is on its way"]
    assert RelayedMessage.objects.filter(direction="out").count() == 1
    row = InboxUpdate.objects.get()
    assert row.lease_token is not None  # held still: the holder "died" with it
    assert inbox.later(seconds=60) == 0  # the lease has not lapsed yet

    assert inbox.later(seconds=1) == 1  # taken over

    assert dm_texts(telegram, user) == ["your refund is on its way"]
    assert len(telegram.calls("sendMessage")) == 1
    assert ProcessedUpdate.objects.get(update_id=reply["update_id"]).attempts == 1
    assert _claims([reply]) == ["processed"]
    assert inbox.waiting() == []


@pytest.mark.django_db(transaction=True)
def test_a_take_over_after_the_inbound_ledger_row_relays_nothing_again(
    bot_settings, bot_row, clock, webhook, telegram, user, topic, inbox
):
    message = telegram.private_message(user, text="once is enough")
    telegram.forget_calls()

    with deletes_refused("update_inbox"):
        webhook.deliver_ok(message)
    inbox.later(seconds=61)

    assert topic_texts(telegram, topic.thread_id).count("once is enough") == 1
    assert len(telegram.calls("sendMessage")) == 1
    assert _claims([message]) == ["processed"]
