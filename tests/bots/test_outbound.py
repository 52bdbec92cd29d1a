"""Admins answering in a topic (spec §3) and native topic events (spec §4.12)."""

from __future__ import annotations

import pytest

from bots import texts
from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import START, Clock, Inbox, Webhook
from tests.bots.helpers import dm_texts, general_texts, open_conversation, topic_texts
from tests.fakes.telegram import FakeTelegram, FakeUser


@pytest.fixture
def user(telegram):
    return telegram.user(7001, "Dave", username="dave")


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def test_an_admin_message_reaches_the_user_and_the_ledger(webhook, telegram, user, admin, topic):
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="How can I help?")
    telegram.forget_calls()

    webhook.deliver_ok(update)

    [call] = telegram.calls()
    assert (call.method, call.params) == (
        "sendMessage",
        {"chat_id": user.id, "text": "How can I help?"},
    )
    [dm] = telegram.bot_messages(user.id)
    assert dm.text == "How can I help?"
    ledger = RelayedMessage.objects.get(direction="out")
    assert (ledger.user_id, ledger.thread_id, ledger.content_type) == (
        user.id,
        topic.thread_id,
        "text",
    )
    assert (ledger.group_msg_id, ledger.private_msg_id) == (
        update["message"]["message_id"],
        dm.message_id,
    )


@pytest.mark.parametrize(
    ("kind", "method"),
    [
        ("photo", "sendPhoto"),
        ("video", "sendVideo"),
        ("animation", "sendAnimation"),
        ("document", "sendDocument"),
        ("voice", "sendVoice"),
        ("audio", "sendAudio"),
        ("sticker", "sendSticker"),
    ],
)
def test_admin_media_are_relayed_by_type(webhook, telegram, user, admin, topic, kind, method):
    content = {kind: f"admin-{kind}"}
    if kind != "sticker":
        content["caption"] = "/not a command in a caption"
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, **content))

    [call] = telegram.calls()
    expected = {"chat_id": user.id, kind: f"admin-{kind}"}
    if kind != "sticker":
        expected["caption"] = "/not a command in a caption"
    assert (call.method, call.params) == (method, expected)
    assert RelayedMessage.objects.filter(direction="out", content_type=kind).count() == 1


def test_a_topic_without_binding_gets_the_notice(webhook, telegram, admin):
    thread_id = telegram.create_topic_by_hand("made by hand")

    webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="anyone?"))

    assert topic_texts(telegram, thread_id) == [texts.no_binding()]
    assert RelayedMessage.objects.count() == 0


def test_a_reply_in_a_natively_closed_topic_reopens_it_and_reaches_the_user(
    webhook, telegram, user, admin, topic
):
    """Issue 36: the original sent "no valid binding" into the closed topic, which Telegram
    refuses (TOPIC_CLOSED) — the admin's reply went nowhere and nobody was told."""
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="still there?")
    telegram.forget_calls()

    webhook.deliver_ok(update)

    assert [(call.method, call.status) for call in telegram.calls()] == [
        ("reopenForumTopic", 200),
        ("sendMessage", 200),
    ]
    assert telegram.topic(topic.thread_id).closed is False
    assert Topic.objects.get().status == "open"
    assert dm_texts(telegram, user) == ["still there?"]
    ledger = RelayedMessage.objects.get(direction="out")
    assert ledger.group_msg_id == update["message"]["message_id"]


def test_a_binding_closed_in_the_database_only_is_reopened_for_the_reply(
    webhook, telegram, user, admin, topic
):
    Topic.objects.update(status="closed")  # Telegram shows it open (a missed reopen event)

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="hello?"))

    # reopenForumTopic answers TOPIC_NOT_MODIFIED: open already, which is fine.
    assert [call.status for call in telegram.calls("reopenForumTopic")] == [400]
    assert Topic.objects.get().status == "open"
    assert dm_texts(telegram, user) == ["hello?"]


def test_a_reply_in_an_archived_topic_is_not_relayed_and_the_admin_is_told_in_general(
    webhook, telegram, user, admin, topic
):
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/archive"))
    telegram.forget_calls()
    dms_before = dm_texts(telegram, user)

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="one more"))

    [call] = telegram.calls()  # nothing into the closed topic, nothing to the user
    assert (call.method, call.params.get("message_thread_id"), call.status) == (
        "sendMessage",
        None,
        200,
    )
    assert general_texts(telegram)[-1] == texts.reply_not_relayed_archived(user.id, topic.thread_id)
    assert dm_texts(telegram, user) == dms_before
    assert telegram.topic(topic.thread_id).closed is True
    assert RelayedMessage.objects.filter(direction="out").count() == 0


def test_a_reply_whose_topic_cannot_be_reopened_is_reported_in_general(
    webhook, telegram, user, admin, topic
):
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    telegram.fail("reopenForumTopic", status=400, description="Bad Request: CHAT_ADMIN_REQUIRED")

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="hello?"))

    assert general_texts(telegram) == [texts.reply_not_relayed_closed(user.id, topic.thread_id)]
    assert dm_texts(telegram, user) == []


def test_a_member_command_gets_admins_only_and_other_text_is_ignored(
    webhook, telegram, member, topic
):
    telegram.forget_calls()
    webhook.deliver_ok(telegram.group_message(member, thread_id=topic.thread_id, text="hi all"))
    assert telegram.calls() == []

    webhook.deliver_ok(telegram.group_message(member, thread_id=topic.thread_id, text="/ban"))

    [call] = telegram.calls()
    assert call.params == {
        "chat_id": telegram.support_chat_id,
        "message_thread_id": topic.thread_id,
        "text": texts.admins_only(),
    }
    assert RelayedMessage.objects.filter(direction="out").count() == 0


def test_a_member_command_in_general_is_answered_without_thread(webhook, telegram, member):
    webhook.deliver_ok(telegram.group_message(member, thread_id=None, text="/help@hodor_test_bot"))

    [call] = telegram.calls()
    assert call.params == {
        "chat_id": telegram.support_chat_id,
        "text": "此命令仅限客服管理员使用。",
    }
    assert call.status == 200
    assert [message.text for message in telegram.bot_messages(telegram.support_chat_id)] == [
        texts.admins_only()
    ]


def test_other_bots_are_ignored(webhook, telegram, topic):
    other_bot = telegram.user(8888, "Helper")
    other_bot.is_bot = True
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(other_bot, thread_id=topic.thread_id, text="beep"))

    assert telegram.calls() == []


def test_an_admin_command_is_never_relayed(webhook, telegram, user, admin, topic):
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/note vip"))

    assert dm_texts(telegram, user) == []
    assert RelayedMessage.objects.filter(direction="out").count() == 0


def test_unsupported_admin_content_is_silent(webhook, telegram, admin, topic):
    telegram.forget_calls()

    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=topic.thread_id, location={"latitude": 1})
    )

    assert telegram.calls() == []


def test_a_reply_to_a_user_who_blocked_the_bot_leaves_one_note_in_the_topic(
    webhook, telegram, user, admin, topic
):
    """Issue 36: the original dropped it silently (spec §3.8), so the admin never knew."""
    telegram.block(user.id)
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="hello?"))
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="anyone?"))

    assert [(call.method, call.status) for call in telegram.calls()] == [
        ("sendMessage", 403),
        ("sendMessage", 200),  # the note, once
        ("sendMessage", 403),
    ]
    note = texts.reply_refused_by_user("Forbidden: bot was blocked by the user")
    assert topic_texts(telegram, topic.thread_id)[-1] == note
    assert topic_texts(telegram, topic.thread_id).count(note) == 1
    assert RelayedMessage.objects.filter(direction="out").count() == 0
    assert BotUser.objects.get(user_id=user.id).status == "active"  # no "blocked" state kept


def test_once_a_reply_reaches_the_user_again_a_new_refusal_is_noted_again(
    webhook, telegram, user, admin, topic
):
    telegram.block(user.id)
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="one"))
    telegram.unblock(user.id)
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="two"))
    telegram.block(user.id)
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="three"))

    note = texts.reply_refused_by_user("Forbidden: bot was blocked by the user")
    assert topic_texts(telegram, topic.thread_id).count(note) == 2
    assert dm_texts(telegram, user) == ["two"]


def test_a_reply_telegram_refuses_for_another_reason_is_noted_each_time(
    webhook, telegram, user, admin, topic
):
    telegram.rejected_file_ids.add("broken")

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, document="broken"))

    assert topic_texts(telegram, topic.thread_id)[-1] == texts.reply_not_delivered(
        "Bad Request: wrong file identifier/HTTP URL specified"
    )


def test_a_retryable_relay_failure_is_retried_once(
    webhook, telegram, user, admin, topic, clock, inbox
):
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="answer")
    telegram.fail("sendMessage", status=500)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    inbox.later(seconds=60)

    assert dm_texts(telegram, user) == ["answer"]
    assert RelayedMessage.objects.filter(direction="out").count() == 1


# Admin content of a few types and the method relaying each (one Bot API call per update).
OUTBOUND_CONTENT = {
    "text": ({"text": "How can I help?"}, "sendMessage"),
    "photo": ({"photo": "admin-photo", "caption": "the form to fill"}, "sendPhoto"),
    "document": ({"document": "admin-document", "caption": "your invoice"}, "sendDocument"),
    "sticker": ({"sticker": "admin-sticker"}, "sendSticker"),
}


@pytest.mark.parametrize("kind", sorted(OUTBOUND_CONTENT))
def test_a_retryable_fault_of_the_outbound_relay_ends_with_exactly_one_copy(
    kind: str,
    webhook: Webhook,
    telegram: FakeTelegram,
    user: FakeUser,
    admin: FakeUser,
    topic: Topic,
    clock: Clock,
    inbox: Inbox,
) -> None:
    content, method = OUTBOUND_CONTENT[kind]
    update = telegram.group_message(admin, thread_id=topic.thread_id, **content)
    telegram.forget_calls()
    telegram.fail_call(1, status=500)

    webhook.deliver_ok(update)
    inbox.later(seconds=60)

    assert [(call.method, call.status) for call in telegram.calls()] == [
        (method, 500),
        (method, 200),
    ]
    [dm] = telegram.bot_messages(user.id)
    assert (dm.kind, dm.text, dm.file_id, dm.caption) == (
        kind,
        content.get("text"),
        content.get(kind) if kind != "text" else None,
        content.get("caption"),
    )
    ledger = RelayedMessage.objects.get(direction="out")
    assert (ledger.content_type, ledger.thread_id, ledger.group_msg_id, ledger.private_msg_id) == (
        kind,
        topic.thread_id,
        update["message"]["message_id"],
        dm.message_id,
    )
    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"
    # Nothing was posted back into the topic (the card and the user's first message only).
    assert len(telegram.topic_messages(topic.thread_id)) == 2


# ------------------------------------------------------------------ native topic events


def test_native_close_and_reopen_only_touch_the_topic(webhook, telegram, user, admin, topic, clock):
    Topic.objects.update(note="keep me")
    clock.advance(minutes=10)
    closed_at = clock.now

    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    row = Topic.objects.get()
    assert (row.status, row.closed_at, row.note) == ("closed", closed_at, "keep me")

    clock.advance(minutes=10)
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    assert Topic.objects.get().closed_at == closed_at  # a repeated close keeps the first time

    webhook.deliver_ok(telegram.reopen_topic_by_hand(topic.thread_id, by=admin))
    row = Topic.objects.get()
    assert (row.status, row.closed_at, row.note) == ("open", None, "keep me")
    user_row = BotUser.objects.get(user_id=user.id)
    assert (user_row.is_verified, user_row.verified_at, user_row.status) == (True, START, "active")
    assert RelayedMessage.objects.count() == 1
    assert telegram.methods().count("sendMessage") == 2  # the card and "hello" only


def test_an_event_for_an_unbound_topic_changes_nothing(webhook, telegram, admin):
    thread_id = telegram.create_topic_by_hand("by hand")

    webhook.deliver_ok(telegram.close_topic_by_hand(thread_id, by=admin))

    assert Topic.objects.count() == 0
    assert telegram.calls() == []
