"""/purgemsg (spec §4.9): every tracked message of the topic (both directions) and the card are
deleted one by one and counted, the ledger is cleared, a fresh card is pinned, and the report
is exact — also when Telegram redelivers half-way, when it asks to slow down, and when the topic
holds more than a webhook may do (the rest continues in Celery)."""

from __future__ import annotations

import pytest

from bots import texts
from bots.models import RelayedMessage, Topic
from tests.bots.conftest import deliver_during_held_call
from tests.bots.helpers import busiest_second, open_conversation, topic_texts

USER_ID = 7301
CARD = "昵称：Hank\n用户 ID：7301\n首次对话：2026-10-01 12:00 (UTC)\n验证状态：✅ 已验证"


@pytest.fixture
def user(telegram):
    return telegram.user(USER_ID, "Hank")


@pytest.fixture
def topic(webhook, telegram, admin, user, clock) -> Topic:
    """Hank's topic: his card, three relayed messages of his and two answers of the admins."""
    open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    for text in ("second", "third"):
        webhook.deliver_ok(telegram.private_message(user, text=text))
    binding = Topic.objects.get(user_id=USER_ID)
    for text in ("answer one", "answer two"):
        webhook.deliver_ok(telegram.group_message(admin, thread_id=binding.thread_id, text=text))
    clock.advance(minutes=10)
    return binding


def _ledger_ids(topic: Topic) -> list[int]:
    return sorted(
        RelayedMessage.objects.filter(thread_id=topic.thread_id).values_list(
            "group_msg_id", flat=True
        )
    )


def _purge(webhook, telegram, admin, topic: Topic) -> dict:
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="/purgemsg")
    webhook.deliver_ok(update)
    return update


def _deleted(telegram, message_id: int) -> bool:
    return telegram.message(telegram.support_chat_id, message_id).deleted


def test_purge_counts_deleted_gone_and_failed_clears_the_ledger_and_pins_a_new_card(
    webhook, telegram, admin, user, topic
):
    chat = telegram.support_chat_id
    hello, second, third, answer_one, answer_two = _ledger_ids(topic)
    card = topic.pinned_msg_id
    telegram.delete_message_by_hand(chat, second)  # already gone
    telegram.make_undeletable(chat, answer_one)  # the bot may not delete it
    telegram.forget_calls()

    _purge(webhook, telegram, admin, topic)

    calls = telegram.calls()
    assert [(call.method, call.params.get("message_id"), call.status) for call in calls[:6]] == [
        ("deleteMessage", card, 200),
        ("deleteMessage", hello, 200),
        ("deleteMessage", second, 400),  # "message to delete not found"
        ("deleteMessage", third, 200),
        ("deleteMessage", answer_one, 400),  # "message can't be deleted"
        ("deleteMessage", answer_two, 200),
    ]
    new_card = Topic.objects.get().pinned_msg_id
    report = "\n".join(
        [
            texts.purge_done(4),
            texts.purge_already_gone(1),
            texts.purge_failed(1),
            texts.purge_card_pinned(),
        ]
    )
    assert report == (
        "清理完成：已删除 4 条消息。\n1 条消息已不存在。\n"
        "⚠️ 1 条消息删除失败（机器人可能缺少删除权限），已不再跟踪，请手动删除。\n"
        "已重新发送并置顶用户信息。"
    )
    assert [(call.method, call.params) for call in calls[6:]] == [
        ("sendMessage", {"chat_id": chat, "message_thread_id": topic.thread_id, "text": CARD}),
        ("pinChatMessage", {"chat_id": chat, "message_id": new_card, "disable_notification": True}),
        ("sendMessage", {"chat_id": chat, "message_thread_id": topic.thread_id, "text": report}),
    ]
    assert RelayedMessage.objects.filter(thread_id=topic.thread_id).count() == 0
    assert new_card not in (None, card)
    assert telegram.pinned() == [new_card]
    assert topic_texts(telegram, topic.thread_id) == [CARD, report]
    assert [_deleted(telegram, message_id) for message_id in (card, hello, third, answer_two)] == [
        True
    ] * 4
    assert _deleted(telegram, answer_one) is False  # left for the admins, untracked now
    assert telegram.topic(topic.thread_id).deleted is False  # the topic itself stays


def test_messages_relayed_after_the_purge_are_tracked_and_purged_next_time(
    webhook, telegram, admin, user, topic
):
    _purge(webhook, telegram, admin, topic)
    webhook.deliver_ok(telegram.private_message(user, text="after the purge"))
    [(copy_id,)] = RelayedMessage.objects.values_list("group_msg_id")
    card = Topic.objects.get().pinned_msg_id

    _purge(webhook, telegram, admin, topic)

    assert _deleted(telegram, copy_id) and _deleted(telegram, card)
    assert topic_texts(telegram, topic.thread_id)[-1] == "\n".join(
        [texts.purge_done(2), texts.purge_card_pinned()]
    )


def test_a_retry_half_way_converges(webhook, telegram, admin, user, topic, clock, inbox):
    targets = sorted([topic.pinned_msg_id, *_ledger_ids(topic)])
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="/purgemsg")
    telegram.fail_call(3, status=502)  # the third deletion: Telegram has a bad moment

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    assert [_deleted(telegram, message_id) for message_id in targets] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    assert RelayedMessage.objects.filter(thread_id=topic.thread_id).count() == 5  # not yet
    inbox.later(seconds=60)

    report = "\n".join(
        [texts.purge_done(4), texts.purge_already_gone(2), texts.purge_card_pinned()]
    )
    assert all(_deleted(telegram, message_id) for message_id in targets)
    assert RelayedMessage.objects.filter(thread_id=topic.thread_id).count() == 0
    assert topic_texts(telegram, topic.thread_id) == [CARD, report]  # one card, one report
    webhook.deliver_ok(update)  # a duplicate does nothing more
    assert topic_texts(telegram, topic.thread_id) == [CARD, report]


def test_telegram_asking_to_slow_down_is_obeyed_without_a_storm(
    webhook, telegram, admin, user, topic, bot_settings
):
    for number in range(19):  # 25 targets in all
        message_id = telegram.bot_sends(
            telegram.support_chat_id, text=f"old {number}", thread_id=topic.thread_id
        )
        RelayedMessage.objects.create(
            bot_id=telegram.bot.id,
            user_id=USER_ID,
            thread_id=topic.thread_id,
            direction="in",
            group_msg_id=message_id,
            private_msg_id=number + 1,
        )
    bot_settings.TELEGRAM_DELETES_PER_SECOND = "1000"  # faster than Telegram allows
    telegram.limit_rate(10)
    telegram.forget_calls()

    _purge(webhook, telegram, admin, topic)

    deletions = telegram.calls("deleteMessage")
    limited = [index for index, call in enumerate(deletions) if call.status == 429]
    assert len(limited) == 2  # one per second of work: the 11th and the 21st deletion
    for index in limited:
        retry_after = deletions[index].retry_after
        waited = deletions[index + 1].at - deletions[index].at
        assert deletions[index + 1].params == deletions[index].params  # the same message again
        assert deletions[index + 1].status == 200
        assert retry_after >= 1
        assert waited >= retry_after
    assert len([call for call in deletions if call.status == 200]) == 25
    assert topic_texts(telegram, topic.thread_id)[-1] == "\n".join(
        [texts.purge_done(25), texts.purge_card_pinned()]
    )


def test_deletions_keep_the_configured_pace(webhook, telegram, admin, user, topic, bot_settings):
    for number in range(35):  # 41 targets in all: the card and 40 ledger messages
        message_id = telegram.bot_sends(
            telegram.support_chat_id, text=f"old {number}", thread_id=topic.thread_id
        )
        RelayedMessage.objects.create(
            bot_id=telegram.bot.id,
            user_id=USER_ID,
            thread_id=topic.thread_id,
            direction="in",
            group_msg_id=message_id,
            private_msg_id=number + 1,
        )
    bot_settings.TELEGRAM_DELETES_PER_SECOND = "20"
    telegram.forget_calls()

    _purge(webhook, telegram, admin, topic)

    deletions = telegram.calls("deleteMessage")
    assert [call.status for call in deletions] == [200] * 41
    started = [call.at for call in deletions]
    assert busiest_second(started) <= 21
    # 40 intervals of 1/20 s between the first call and the last (less the first call's trip
    # to the fake); without pacing the 41 calls take a fraction of a second.
    assert started[-1] - started[0] >= 1.95
    assert topic_texts(telegram, topic.thread_id)[-1] == "\n".join(
        [texts.purge_done(41), texts.purge_card_pinned()]
    )


def test_a_member_cannot_purge(webhook, telegram, member, user, topic):
    telegram.forget_calls()

    _purge(webhook, telegram, member, topic)

    assert [call.method for call in telegram.calls()] == ["sendMessage"]
    assert topic_texts(telegram, topic.thread_id)[-1] == texts.admins_only()
    assert RelayedMessage.objects.filter(thread_id=topic.thread_id).count() == 5


def test_purge_in_a_topic_without_binding_gets_the_notice(webhook, telegram, admin):
    thread_id = telegram.create_topic_by_hand("by hand")
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="/purgemsg"))

    assert topic_texts(telegram, thread_id) == [texts.no_binding()]
    assert telegram.calls("deleteMessage") == []


@pytest.mark.django_db(transaction=True)
def test_one_bulk_deletion_at_a_time(webhook, telegram, admin, user, topic, clock):
    other = open_conversation(
        webhook, telegram, telegram.user(7302, "Ivy"), bot_id=telegram.bot.id, now=clock.now
    )
    first = telegram.group_message(admin, thread_id=topic.thread_id, text="/purgemsg")
    # Another topic's purge (a second /purgemsg in the same topic would queue behind the first,
    # its conversation's order, and find nothing left to delete).
    second = telegram.group_message(admin, thread_id=other.thread_id, text="/purgemsg")

    responses = deliver_during_held_call(telegram, "deleteMessage", first, second)

    assert [response.status_code for response in responses] == [200, 200]
    assert topic_texts(telegram, other.thread_id)[-1] == texts.bulk_busy()  # while the first ran
    shown = topic_texts(telegram, topic.thread_id)
    assert shown[-1] == "\n".join([texts.purge_done(6), texts.purge_card_pinned()])
    assert len(telegram.calls("deleteMessage")) == 6
