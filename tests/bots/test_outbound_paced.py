"""Every send and edit of the bot goes through the shared outbound limiter (issue #24): the
paced client against the fake Bot API, and the webhook's budget — an update that cannot get
its permit in time is answered 200 with nothing done, stays in the inbox, and the inbox's
worker relays it once (issue 36)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django_redis import get_redis_connection

from bots import redis_keys
from bots.clients.telegram import TelegramRetryableError
from bots.conf import load_config
from bots.models import BotUser, InboxUpdate, ProcessedUpdate, RelayedMessage
from bots.outbound.limiter import OutboundLimiter, Priority
from bots.outbound.paced import NoSendPermit, PacedTelegramClient, outbound_priority
from tests.bots.helpers import dm_texts, open_conversation, table_state, topic_texts, user_row


@pytest.fixture
def group_of_three(bot_settings, telegram):
    """Three messages a minute into the group, a short budget."""
    bot_settings.TELEGRAM_GROUP_SENDS_PER_WINDOW = "3"
    bot_settings.TELEGRAM_SEND_BUDGET_MS = "300"
    return bot_settings


def _client(**options) -> PacedTelegramClient:
    """A client as another process builds it: its own limiter object, the same Redis."""
    config = load_config()
    client = config.telegram_client(**options)
    assert isinstance(client, PacedTelegramClient)
    return client


def test_a_full_group_stores_the_update_with_nothing_done_and_the_worker_relays_it_later(
    group_of_three, webhook, telegram, user, clock, inbox, queued_drains
):
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    # The topic's creation, its card and the "hello" took the group's three of this minute.
    assert [call.method for call in telegram.calls() if call.ok and call.method != "getMe"] == [
        "createForumTopic",
        "sendMessage",
        "pinChatMessage",
        "sendMessage",
    ]
    update = telegram.private_message(user, text="one more")
    telegram.forget_calls()
    before = table_state()

    webhook.deliver_ok(update)

    assert telegram.calls() == []  # no call made: Telegram saw nothing
    assert table_state()["messages"] == before["messages"]
    assert inbox.waiting() == [update["update_id"]]
    # The worker is nudged within 10 s (the limiter expects the group's room in a minute:
    # the worker waits for it itself, ready the moment it comes).
    [(_, _, countdown)] = queued_drains.sent
    assert countdown == 10.0

    inbox.later(seconds=90)  # the group's minute has passed
    webhook.deliver_ok(update)  # and a duplicate delivery changes nothing

    assert topic_texts(telegram, topic.thread_id).count("one more") == 1
    assert RelayedMessage.objects.filter(user_id=user.id, direction="in").count() == 2
    assert _claim(telegram, update) == ("processed", 0)


def test_a_429_in_the_group_is_honoured_by_every_process(bot_settings, telegram):
    telegram.fail("sendMessage", status=429, retry_after=1)
    first = _client(in_place_retry=False, budget_seconds=5)
    other_process = _client(budget_seconds=5)
    chat = telegram.support_chat_id

    telegram.met(telegram.user(5005, "Eve"))

    with pytest.raises(TelegramRetryableError):
        first.send_message(chat_id=chat, text="refused")
    other_process.send_message(chat_id=5005, text="a private chat is not blocked")
    other_process.send_message(chat_id=chat, text="after the wait")

    refused, private, accepted = telegram.calls()
    assert (refused.status, refused.retry_after) == (429, 1)
    assert accepted.ok and accepted.at - refused.at >= 1.0
    assert private.ok and private.at - refused.at < 1.0


def test_a_short_429_is_retried_in_place_after_the_limiter_lets_it_through(bot_settings, telegram):
    telegram.fail("sendMessage", status=429, retry_after=1)

    _client(budget_seconds=5).send_message(chat_id=telegram.support_chat_id, text="again")

    refused, accepted = telegram.calls()
    assert refused.status == 429 and accepted.ok
    assert accepted.params == refused.params
    assert accepted.at - refused.at >= 1.0


def test_no_permit_within_the_budget_means_no_call(group_of_three, telegram):
    client = _client(budget_seconds=0.3)
    chat = telegram.support_chat_id
    for text in ("1", "2", "3"):
        client.send_message(chat_id=chat, text=text)

    with pytest.raises(NoSendPermit):
        client.send_message(chat_id=chat, text="4")

    assert [call.params["text"] for call in telegram.calls()] == ["1", "2", "3"]


def test_a_card_edit_waits_for_a_relay_waiting_for_the_same_group(bot_settings, telegram):
    bot_settings.TELEGRAM_CHAT_INTERVAL_MS = "300"
    chat = telegram.support_chat_id
    card = telegram.bot_sends(chat, text="card")
    hold = telegram.hold("sendMessage")
    order = []

    def send(text: str, priority: Priority) -> None:
        with outbound_priority(priority):
            if priority == Priority.CARD:
                _client(budget_seconds=5).edit_message_text(
                    chat_id=chat, message_id=card, text=text
                )
            else:
                _client(budget_seconds=5).send_message(chat_id=chat, text=text)
        order.append(text)

    first = threading.Thread(target=send, args=("first relay", Priority.LIVE))
    first.start()
    assert hold.wait_until_arrived()
    relay = threading.Thread(target=send, args=("waiting relay", Priority.LIVE))
    relay.start()
    threading.Event().wait(0.1)  # the relay is registered as the group's waiter
    edit = threading.Thread(target=send, args=("card edit", Priority.CARD))
    edit.start()
    threading.Event().wait(0.1)
    hold.release()
    for thread in (first, relay, edit):
        thread.join(10)

    assert order == ["first relay", "waiting relay", "card edit"]


def test_an_album_takes_one_permit_per_item(group_of_three, telegram):
    client = _client(budget_seconds=0.3)
    chat = telegram.support_chat_id
    topic = telegram.create_topic_by_hand("album")

    client.send_media_group(
        chat_id=chat,
        message_thread_id=topic,
        media=[{"type": "photo", "media": f"p{n}"} for n in range(3)],
    )

    with pytest.raises(NoSendPermit):
        client.send_message(chat_id=chat, text="a fourth message this minute")
    assert [call.method for call in telegram.calls()] == ["sendMediaGroup"]


# ------------------------------------------------------------------ waiting is not failing


def _claim(telegram, update) -> tuple[str, int]:
    row = ProcessedUpdate.objects.get(bot_id=telegram.bot.id, update_id=update["update_id"])
    return row.status, row.attempts


def _group_minute_passes(telegram) -> None:
    """The group's window ends for the limiter (its count restarts), the clock left alone."""
    get_redis_connection("default").delete(
        redis_keys.outbound_group(telegram.bot.id, telegram.support_chat_id)
    )


def _no_room_yet(inbox) -> None:
    """The worker tries again a minute later; the group's window in the limiter has not
    passed (the limiter runs on Redis's clock, which the test does not move)."""
    inbox.clock.advance(seconds=61, outbound_limiter=False)
    inbox.drain()


def test_attempts_that_got_no_send_permit_never_make_the_update_poison(
    group_of_three, webhook, telegram, user, clock, inbox
):
    """MAX_ATTEMPTS is 3: six attempts that each waited in vain for the full group are not
    six failures — the seventh, once the group has room, relays the message (once)."""
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="waited")
    telegram.forget_calls()

    webhook.deliver_ok(update)
    for _ in range(5):
        _no_room_yet(inbox)

    assert telegram.calls() == []
    assert _claim(telegram, update) == ("processing", 0)
    assert InboxUpdate.objects.get().waits == 6

    _group_minute_passes(telegram)
    inbox.later(seconds=61, outbound_limiter=False)
    webhook.deliver_ok(update)  # a duplicate changes nothing

    assert topic_texts(telegram, topic.thread_id).count("waited") == 1
    assert _claim(telegram, update) == ("processed", 0)
    assert RelayedMessage.objects.filter(user_id=user.id, direction="in").count() == 2


def test_a_failure_after_waiting_is_still_counted(
    group_of_three, webhook, telegram, user, clock, inbox
):
    """Only the attempts that got no permit are not counted: an attempt that had its permit
    and failed counts as ever, so a real poison update is still given up."""
    open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="poison")
    telegram.forget_calls()
    webhook.deliver_ok(update)  # no permit: not counted
    _group_minute_passes(telegram)
    telegram.fail("sendMessage", status=502, times=100)

    for wait in (60, 60, 60, 120):  # the first attempt, then the back-offs
        clock.advance(seconds=wait, outbound_limiter=False)
        _group_minute_passes(telegram)
        assert inbox.drain() == 1

    assert _claim(telegram, update) == ("failed", 3)
    assert len(telegram.calls("sendMessage")) == 3  # the fourth attempt was declared poison


@pytest.mark.django_db(transaction=True)
def test_a_call_waiting_for_its_permit_gives_its_database_connection_back(
    group_of_three, bot_row, telegram
):
    """A burst of webhooks waiting for the support group must not hold every pooled
    connection; inside a transaction the connection is kept (the transaction needs it)."""
    limiter = OutboundLimiter(bot_id=telegram.bot.id, limits=load_config().outbound_limits)
    for _ in range(3):  # the group's three of this minute, in flight
        assert limiter.acquire(chat_id=telegram.support_chat_id, timeout=1) is not None
    client = _client(budget_seconds=0.2)
    assert BotUser.objects.count() == 0  # the thread holds a connection now
    assert connection.connection is not None

    with pytest.raises(NoSendPermit):
        client.send_message(chat_id=telegram.support_chat_id, text="waits in vain")

    assert connection.connection is None
    assert BotUser.objects.count() == 0  # and takes one again when it needs it

    with transaction.atomic():
        BotUser.objects.count()
        with pytest.raises(NoSendPermit):
            _client(budget_seconds=0.2).send_message(
                chat_id=telegram.support_chat_id, text="waits inside a transaction"
            )
        assert connection.connection is not None
        assert BotUser.objects.count() == 0
    assert telegram.calls() == []


def test_a_retry_edits_no_card_that_the_given_back_attempt_had_settled(
    group_of_three, webhook, telegram, user, clock, inbox
):
    """The first attempt found the card current and only waited for the relay's permit: the
    next relays without editing the card first (an edit Telegram would refuse as "message is
    not modified", and a wait for a permit the relay needs more)."""
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="no edit needed")
    webhook.deliver_ok(update)  # no permit for the relay
    _group_minute_passes(telegram)
    telegram.forget_calls()

    inbox.later(seconds=60, outbound_limiter=False)

    assert [call.method for call in telegram.calls()] == ["sendMessage"]
    assert topic_texts(telegram, topic.thread_id).count("no edit needed") == 1


def test_a_retry_still_edits_the_card_when_the_given_back_attempt_could_not(
    group_of_three, webhook, telegram, user, clock, inbox
):
    """New names were stored by the first attempt, whose card edit got no permit either: the
    next (where the names no longer look new) edits the card, then relays."""
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    renamed = telegram.user(user.id, "Robert", last_name="Stone", username="bob")
    update = telegram.private_message(renamed, text="call me Robert")
    webhook.deliver_ok(update)  # no permit for the card nor the relay
    _group_minute_passes(telegram)
    telegram.forget_calls()

    inbox.later(seconds=60, outbound_limiter=False)

    assert [call.method for call in telegram.calls()] == ["editMessageText", "sendMessage"]
    assert topic_texts(telegram, topic.thread_id)[0].startswith("昵称：Robert Stone (@bob)")


def test_a_message_given_back_by_many_attempts_passes_the_users_rate_gate_once(
    group_of_three, bot_settings, webhook, telegram, user, clock, inbox
):
    """MAX_MESSAGES_PER_MINUTE is 3 here: four attempts at one message within the minute,
    each given back for want of a permit, count it once — the user is not taken for a flooder
    (unverified, challenged, the message dropped) for the bot's own pacing."""
    bot_settings.MAX_MESSAGES_PER_MINUTE = "3"
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    update = telegram.private_message(user, text="patience")

    webhook.deliver_ok(update)
    for _ in range(3):
        # Due again within the minute (as after a shorter wait than the group's).
        clock.advance(seconds=1, outbound_limiter=False)
        InboxUpdate.objects.update(not_before=clock.now)
        inbox.drain()
    assert InboxUpdate.objects.get().waits == 4
    _group_minute_passes(telegram)
    InboxUpdate.objects.update(not_before=clock.now)
    inbox.drain()

    assert topic_texts(telegram, topic.thread_id).count("patience") == 1
    assert user_row(telegram, user).is_verified
    assert user_row(telegram, user).rate_count == 2  # "hello" and "patience"
    assert dm_texts(telegram, user) == []  # no over-limit notice, no challenge
