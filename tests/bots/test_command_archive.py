"""/archive (spec §4.7): announce, close the topic, soft-archive, tell the user, report in General;
the user comes back through verification into the reopened (or replaced) topic."""

from __future__ import annotations

import pytest

from bots import texts
from bots.models import BotUser, ProcessedUpdate, RelayedMessage, Topic
from tests.bots.conftest import START
from tests.bots.helpers import (
    answer_rightly,
    card_text,
    dm_texts,
    general_texts,
    open_conversation,
    table_state,
    topic_texts,
)

USER_ID = 7101
CARD = "昵称：Finn\n用户 ID：7101\n首次对话：2026-10-01 12:00 (UTC)\n验证状态：✅ 已验证"
CARD_ARCHIVED = CARD.replace("✅ 已验证", "❌ 未验证")


@pytest.fixture
def user(telegram):
    return telegram.user(USER_ID, "Finn")


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    Topic.objects.update(note="prefers email")
    clock.advance(minutes=10)
    return Topic.objects.get()


def _archive(webhook, telegram, admin, thread_id: int) -> dict:
    update = telegram.group_message(admin, thread_id=thread_id, text="/archive")
    webhook.deliver_ok(update)
    return update


def _assert_archived(telegram, user, topic, *, closed_at) -> None:
    row = BotUser.objects.get(bot_id=telegram.bot.id, user_id=user.id)
    assert (row.status, row.is_verified, row.verified_at) == ("deleted", False, None)
    assert (row.verify_request_hash, row.verify_msg_id, row.verify_answer) == (None, None, None)
    binding = Topic.objects.get(bot_id=telegram.bot.id, user_id=user.id)
    assert (binding.thread_id, binding.status, binding.closed_at, binding.note) == (
        topic.thread_id,
        "closed",
        closed_at,
        "prefers email",
    )
    assert RelayedMessage.objects.filter(user_id=user.id).count() == 1  # the ledger is kept


def test_archive_closes_archives_tells_the_user_and_reports_in_general(
    webhook, telegram, admin, user, topic, clock
):
    telegram.forget_calls()

    _archive(webhook, telegram, admin, topic.thread_id)

    calls = telegram.calls()
    assert [(call.method, call.params) for call in calls] == [
        (
            "sendMessage",
            {
                "chat_id": telegram.support_chat_id,
                "message_thread_id": topic.thread_id,
                "text": texts.archive_started(),
            },
        ),
        (
            "closeForumTopic",
            {"chat_id": telegram.support_chat_id, "message_thread_id": topic.thread_id},
        ),
        (
            "editMessageText",
            {
                "chat_id": telegram.support_chat_id,
                "message_id": topic.pinned_msg_id,
                "text": f"{CARD_ARCHIVED}\n备注：prefers email",
            },
        ),
        ("sendMessage", {"chat_id": user.id, "text": texts.archive_notice()}),
        (
            "sendMessage",
            {
                "chat_id": telegram.support_chat_id,
                "text": texts.archive_done(user.id, topic.thread_id),
            },
        ),
    ]
    assert all(call.ok for call in calls)
    assert telegram.topic(topic.thread_id).closed is True
    _assert_archived(telegram, user, topic, closed_at=clock.now)
    assert dm_texts(telegram, user) == [texts.archive_notice()]
    assert general_texts(telegram) == [texts.archive_done(user.id, topic.thread_id)]
    assert texts.archive_done(user.id, topic.thread_id) == (
        f"已归档用户 {USER_ID} 的会话（话题 {topic.thread_id}）：话题已关闭，验证已清除，"
        "资料、消息记录和备注均保留。用户再次发消息并通过验证后会重新打开话题。"
    )


def test_the_user_returns_through_verification_into_the_reopened_topic(
    webhook, telegram, admin, user, topic, clock
):
    _archive(webhook, telegram, admin, topic.thread_id)
    clock.advance(minutes=1)

    webhook.deliver_ok(telegram.private_message(user, text="hello again"))

    challenge = telegram.bot_messages(user.id)[-1]
    assert challenge.text.startswith("为了确认你是真人")
    assert Topic.objects.get().status == "closed"  # held at the gate: nothing reopened yet
    assert answer_rightly(webhook, telegram, user, challenge) == texts.toast_verified()
    assert card_text(telegram, topic) == f"{CARD}\n备注：prefers email"
    webhook.deliver_ok(telegram.private_message(user, text="it's me"))

    binding = Topic.objects.get()
    assert (binding.thread_id, binding.status, binding.closed_at, binding.note) == (
        topic.thread_id,
        "open",
        None,
        "prefers email",
    )
    assert BotUser.objects.get(user_id=user.id).status == "active"
    assert telegram.topic(topic.thread_id).closed is False
    assert topic_texts(telegram, topic.thread_id)[-1] == "it's me"
    assert "hello again" not in topic_texts(telegram, topic.thread_id)  # never replayed


def test_an_already_closed_topic_is_archived_all_the_same(
    webhook, telegram, admin, user, topic, clock
):
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))
    closed_at = clock.now
    clock.advance(minutes=1)
    telegram.forget_calls()

    _archive(webhook, telegram, admin, topic.thread_id)

    methods = [(call.method, call.status) for call in telegram.calls()]
    assert methods == [
        ("sendMessage", 400),  # TOPIC_CLOSED: the notice cannot go in ...
        ("sendMessage", 200),  # ... so it goes to General (issue 36)
        ("closeForumTopic", 400),  # TOPIC_NOT_MODIFIED: already closed = success
        ("editMessageText", 200),
        ("sendMessage", 200),
        ("sendMessage", 200),
    ]
    _assert_archived(telegram, user, topic, closed_at=closed_at)
    assert general_texts(telegram) == [
        texts.closed_topic_reply(topic.thread_id, texts.archive_started()),
        texts.archive_done(user.id, topic.thread_id),
    ]


def test_a_deleted_topic_is_archived_and_replaced_when_the_user_returns(
    webhook, telegram, admin, user, topic, clock
):
    telegram.delete_topic_by_hand(topic.thread_id)
    telegram.forget_calls()

    _archive(webhook, telegram, admin, topic.thread_id)

    assert [call.method for call in telegram.calls()] == [
        "sendMessage",  # "message thread not found", logged
        "closeForumTopic",  # TOPIC_ID_INVALID: gone counts as closed
        "sendMessage",  # the DM (no card edit: the card died with the topic)
        "sendMessage",  # the report in General
    ]
    _assert_archived(telegram, user, topic, closed_at=clock.now)  # the binding is kept
    assert general_texts(telegram) == [
        f"{texts.archive_done(user.id, topic.thread_id)}\n{texts.archive_topic_gone()}"
    ]

    BotUser.objects.filter(user_id=user.id).update(is_verified=True, verified_at=clock.now)
    webhook.deliver_ok(telegram.private_message(user, text="back"))

    binding = Topic.objects.get()
    assert binding.thread_id != topic.thread_id
    assert (binding.status, binding.note) == ("open", None)  # the note went with the old topic
    assert topic_texts(telegram, binding.thread_id)[-1] == "back"


def test_a_close_refused_for_another_reason_changes_nothing(webhook, telegram, admin, user, topic):
    before = table_state()
    telegram.fail(
        "closeForumTopic", status=400, description="Bad Request: not enough rights to close topic"
    )

    _archive(webhook, telegram, admin, topic.thread_id)

    assert table_state() == before
    assert telegram.topic(topic.thread_id).closed is False
    assert dm_texts(telegram, user) == []
    assert general_texts(telegram) == [texts.archive_failed(user.id, topic.thread_id)]


def test_a_user_who_blocked_the_bot_is_archived_and_the_report_says_so(
    webhook, telegram, admin, user, topic, clock
):
    telegram.block(user.id)

    _archive(webhook, telegram, admin, topic.thread_id)

    _assert_archived(telegram, user, topic, closed_at=clock.now)
    assert general_texts(telegram) == [
        f"{texts.archive_done(user.id, topic.thread_id)}\n{texts.archive_notice_failed()}"
    ]


def test_a_member_gets_admins_only(webhook, telegram, member, user, topic):
    before = table_state()
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(member, thread_id=topic.thread_id, text="/archive"))

    assert table_state() == before
    [call] = telegram.calls()
    assert call.params["text"] == texts.admins_only()
    assert telegram.topic(topic.thread_id).closed is False


def test_no_binding_gets_the_notice(webhook, telegram, admin, topic):
    thread_id = telegram.create_topic_by_hand("by hand")
    before = table_state()
    telegram.forget_calls()

    _archive(webhook, telegram, admin, thread_id)

    assert table_state() == before
    assert topic_texts(telegram, thread_id) == [texts.no_binding()]
    assert [call.method for call in telegram.calls()] == ["sendMessage"]


def test_in_general_archive_is_ignored(webhook, telegram, admin, topic):
    before = table_state()
    telegram.forget_calls()

    webhook.deliver_ok(telegram.group_message(admin, thread_id=None, text="/archive"))

    assert table_state() == before
    assert telegram.calls() == []


def test_a_repeated_archive_keeps_the_rows(webhook, telegram, admin, user, topic, clock):
    _archive(webhook, telegram, admin, topic.thread_id)
    archived = table_state()
    archived_at = clock.now
    clock.advance(minutes=3)

    _archive(webhook, telegram, admin, topic.thread_id)

    assert table_state() == archived  # closed_at keeps the first close
    _assert_archived(telegram, user, topic, closed_at=archived_at)
    assert general_texts(telegram) == [
        texts.archive_done(user.id, topic.thread_id),
        # The second one's notice meets the closed topic: General has it instead.
        texts.closed_topic_reply(topic.thread_id, texts.archive_started()),
        texts.archive_done(user.id, topic.thread_id),
    ]


# The calls of a successful /archive, in order; a retryable fault is injected at each in turn.
ARCHIVE_CALLS = ["sendMessage", "closeForumTopic", "editMessageText", "sendMessage", "sendMessage"]


@pytest.mark.parametrize("call_number", range(1, len(ARCHIVE_CALLS) + 1))
def test_a_retryable_fault_at_any_call_converges_on_retry(
    call_number, webhook, telegram, admin, user, topic, clock, inbox
):
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="/archive")
    telegram.forget_calls()
    telegram.fail_call(call_number, status=500)
    archived_at = clock.now

    webhook.deliver_ok(update)
    card_edit = ARCHIVE_CALLS[call_number - 1] == "editMessageText"
    # The card edit is best effort: done at once; any other fault: the worker retries it.
    assert inbox.waiting() == ([] if card_edit else [update["update_id"]])
    inbox.later(seconds=60)

    assert ProcessedUpdate.objects.get(update_id=update["update_id"]).status == "processed"
    # Closed before the fault (or at the retry, when the close itself failed).
    _assert_archived(telegram, user, topic, closed_at=archived_at if call_number > 2 else clock.now)
    assert telegram.topic(topic.thread_id).closed is True
    # A retry after the close repeats the notice, which the closed topic refuses: in General.
    repeated_notice = [texts.closed_topic_reply(topic.thread_id, texts.archive_started())]
    assert general_texts(telegram) == (repeated_notice if call_number in (4, 5) else []) + [
        texts.archive_done(user.id, topic.thread_id)
    ]
    # A failed card edit is not retried (best effort; the update was done at the first try).
    assert card_text(telegram, topic) == (
        CARD if card_edit else f"{CARD_ARCHIVED}\n备注：prefers email"
    )
    # At-least-once: a step that had succeeded before the fault is repeated by the retry only
    # when it comes before the failed one and can still be done (the notice while the topic
    # is open, the DM when the General report failed).
    notices = topic_texts(telegram, topic.thread_id).count(texts.archive_started())
    assert notices == (2 if call_number == 2 else 1)
    assert dm_texts(telegram, user) == [texts.archive_notice()] * (2 if call_number == 5 else 1)


def test_archive_keeps_first_seen_and_the_card_time(webhook, telegram, admin, user, topic):
    _archive(webhook, telegram, admin, topic.thread_id)

    assert BotUser.objects.get(user_id=user.id).first_seen_at == START
