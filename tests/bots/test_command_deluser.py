"""/deluser (spec §4.8): the warning with its two buttons, the checks of a click in their order,
first-click-wins decisions, and the physical delete converging under Telegram's redelivery."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bots import texts
from bots.models import BotUser, DeleteConfirmation, RelayedMessage, Topic
from bots.pipeline import deluser
from tests.bots.conftest import SECOND_ADMIN_ID, deliver_during_held_call
from tests.bots.helpers import (
    click_in_group,
    deletes_refused,
    dm_texts,
    group_click,
    keyboard_data,
    open_conversation,
    table_state,
    topic_texts,
)

USER_ID = 7201
OTHER_ID = 7202


@pytest.fixture
def user(telegram):
    return telegram.user(USER_ID, "Gail")


@pytest.fixture
def second_admin(telegram):
    return telegram.user(SECOND_ADMIN_ID, "Sam")


@pytest.fixture
def topic(webhook, telegram, admin, user, clock) -> Topic:
    """Gail's conversation: her message, an admin's answer, a note; and Olaf's beside it."""
    open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    binding = Topic.objects.get(user_id=user.id)
    webhook.deliver_ok(telegram.group_message(admin, thread_id=binding.thread_id, text="hi Gail"))
    Topic.objects.filter(user_id=user.id).update(note="asked to be forgotten")
    other = telegram.user(OTHER_ID, "Olaf")
    open_conversation(webhook, telegram, other, bot_id=telegram.bot.id, now=clock.now)
    clock.advance(minutes=10)
    return Topic.objects.get(user_id=user.id)


@dataclass(frozen=True)
class Prompt:
    message_id: int
    yes: str  # the buttons' callback data as sent
    no: str


def _prompt(webhook, telegram, admin, topic) -> Prompt:
    """/deluser in the topic; the prompt as the admins see it."""
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/deluser"))
    message = telegram.topic_messages(topic.thread_id)[-1]
    yes, no = keyboard_data(message)
    return Prompt(message.message_id, yes, no)


def _gail_rows() -> dict:
    return {
        "users": BotUser.objects.filter(user_id=USER_ID).count(),
        "topics": Topic.objects.filter(user_id=USER_ID).count(),
        "messages": RelayedMessage.objects.filter(user_id=USER_ID).count(),
        "prompts": DeleteConfirmation.objects.filter(user_id=USER_ID).count(),
    }


KEPT = {"users": 1, "topics": 1, "messages": 2, "prompts": 1}
GONE = {"users": 0, "topics": 0, "messages": 0, "prompts": 0}


def test_the_command_sends_the_warning_and_records_a_pending_prompt(
    webhook, telegram, admin, user, topic, clock
):
    before = table_state()
    telegram.forget_calls()

    prompt = _prompt(webhook, telegram, admin, topic)

    epoch = int(clock.now.timestamp())
    payload = f"{USER_ID}:{topic.thread_id}:{epoch}"
    [call] = telegram.calls()
    assert (call.method, call.params) == (
        "sendMessage",
        {
            "chat_id": telegram.support_chat_id,
            "message_thread_id": topic.thread_id,
            "text": texts.deluser_prompt(USER_ID),
            "reply_markup": {
                "inline_keyboard": [
                    [{"text": "确认彻底删除", "callback_data": f"d:yes:{payload}"}],
                    [{"text": "取消", "callback_data": f"d:no:{payload}"}],
                ]
            },
        },
    )
    assert texts.deluser_prompt(USER_ID).startswith(f"⚠️ 确认要彻底删除用户 {USER_ID} 吗？\n")
    row = DeleteConfirmation.objects.get()
    assert (row.prompt_msg_id, row.user_id, row.thread_id, row.started_at, row.status) == (
        prompt.message_id,
        USER_ID,
        topic.thread_id,
        epoch,
        "pending",
    )
    assert row.confirm_callback_id is None
    assert table_state() == before  # nothing deleted yet


def test_confirm_deletes_the_topic_and_every_row_and_the_user_becomes_a_stranger(
    webhook, telegram, admin, user, topic, clock
):
    prompt = _prompt(webhook, telegram, admin, topic)
    others = table_state()
    clock.advance(seconds=30)
    telegram.forget_calls()

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert toast == texts.toast_deluser_done() == "群内话题和 hodor 数据已删除；私聊记录保留。"
    assert [(call.method, call.status) for call in telegram.calls()] == [
        ("deleteForumTopic", 200),
        ("answerCallbackQuery", 200),
    ]
    assert telegram.calls()[0].params == {
        "chat_id": telegram.support_chat_id,
        "message_thread_id": topic.thread_id,
    }
    assert telegram.topic(topic.thread_id).deleted is True
    assert _gail_rows() == GONE
    # Olaf's rows are untouched.
    after = table_state()
    assert after["users"] == [r for r in others["users"] if r["user_id"] != USER_ID]
    assert after["topics"] == [r for r in others["topics"] if r["user_id"] != USER_ID]
    assert after["messages"] == [r for r in others["messages"] if r["user_id"] != USER_ID]

    clock.advance(minutes=5)
    webhook.deliver_ok(telegram.private_message(user, text="hello again"))

    answer, welcome, challenge = telegram.bot_messages(USER_ID)  # the DM history stays
    assert answer.text == "hi Gail"
    assert welcome.text == texts.welcome_default()
    assert challenge.text.startswith("为了确认你是真人")
    stranger = BotUser.objects.get(user_id=USER_ID)
    assert (stranger.is_verified, stranger.first_seen_at) == (False, clock.now)
    assert Topic.objects.filter(user_id=USER_ID).count() == 0


@pytest.mark.parametrize(("seconds", "deleted"), [(60, True), (61, False), (-5, True), (-6, False)])
def test_the_window_is_sixty_seconds_with_five_seconds_of_skew(
    seconds, deleted, webhook, telegram, admin, user, topic, clock
):
    prompt = _prompt(webhook, telegram, admin, topic)
    clock.advance(seconds=seconds)

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    if deleted:
        assert toast == texts.toast_deluser_done()
        assert _gail_rows() == GONE
    else:
        assert toast == texts.deluser_expired() == "确认已超时，请重新发送 /deluser。"
        assert _gail_rows() == KEPT
        assert DeleteConfirmation.objects.get().status == "pending"
        shown = telegram.message(telegram.support_chat_id, prompt.message_id)
        assert (shown.text, shown.reply_markup) == (texts.deluser_expired(), None)
        assert telegram.calls("deleteForumTopic") == []


def test_cancel_keeps_everything_and_a_later_confirm_fails(
    webhook, telegram, admin, user, topic, clock
):
    prompt = _prompt(webhook, telegram, admin, topic)
    before = table_state()

    cancelled = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.no)
    confirmed = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert cancelled == texts.deluser_cancelled() == "已取消，未删除任何内容。"
    assert confirmed == texts.toast_deluser_failed() == "Telegram 未能删除，数据已保留。"
    assert table_state() == before
    assert DeleteConfirmation.objects.get().status == "cancelled"
    shown = telegram.message(telegram.support_chat_id, prompt.message_id)
    assert (shown.text, shown.reply_markup) == (texts.deluser_cancelled(), None)
    assert telegram.calls("deleteForumTopic") == []


def test_a_cancel_after_the_window_times_out(webhook, telegram, admin, user, topic, clock):
    prompt = _prompt(webhook, telegram, admin, topic)
    clock.advance(seconds=61)

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.no)

    assert toast == texts.deluser_expired()
    assert DeleteConfirmation.objects.get().status == "pending"


def test_a_non_admin_click_gets_admins_only_and_changes_nothing(
    webhook, telegram, admin, member, user, topic
):
    prompt = _prompt(webhook, telegram, admin, topic)
    before = table_state()

    toast = click_in_group(webhook, telegram, member, prompt.message_id, prompt.yes)

    assert toast == texts.admins_only()
    assert table_state() == before
    assert DeleteConfirmation.objects.get().status == "pending"
    assert telegram.calls("deleteForumTopic") == []


def test_a_non_admin_click_on_a_mismatched_payload_gets_admins_only(
    webhook, telegram, admin, member, user, topic, clock
):
    # The clicker is checked before the prompt's row: a member learns nothing about prompts.
    prompt = _prompt(webhook, telegram, admin, topic)
    epoch = int(clock.now.timestamp())
    mismatched = f"d:yes:{OTHER_ID}:{topic.thread_id}:{epoch}"
    before = table_state()
    telegram.forget_calls()

    toast = click_in_group(webhook, telegram, member, prompt.message_id, mismatched)

    assert toast == texts.admins_only()
    assert [call.method for call in telegram.calls()] == ["answerCallbackQuery"]
    assert table_state() == before
    assert DeleteConfirmation.objects.get().status == "pending"


def test_clicks_from_another_chat_or_thread_and_malformed_payloads_are_silent(
    webhook, telegram, admin, user, topic, clock
):
    prompt = _prompt(webhook, telegram, admin, topic)
    confirm = prompt.yes
    other_thread = confirm.replace(f":{topic.thread_id}:", f":{topic.thread_id + 1}:")
    epoch = int(clock.now.timestamp())
    before = table_state()
    telegram.forget_calls()

    updates = [
        # The same payload under a message of another chat.
        telegram.click(admin, message_id=prompt.message_id, data=confirm, chat_id=-1009999),
        # A payload naming another thread than the topic the prompt is in.
        group_click(telegram, admin, prompt.message_id, other_thread),
        *(
            group_click(telegram, admin, prompt.message_id, data)
            for data in (
                f"d:maybe:{USER_ID}:{topic.thread_id}:{epoch}",
                f"d:yes:{USER_ID}:{topic.thread_id}",
                f"d:yes:0:{topic.thread_id}:{epoch}",
                f"d:yes:{USER_ID}:{topic.thread_id}:{epoch}:1",
                f"d:yes:{'9' * 17}:{topic.thread_id}:{epoch}",
            )
        ),
    ]
    for update in updates:
        webhook.deliver_ok(update)

    assert telegram.calls() == []  # not even an answer
    assert table_state() == before
    assert DeleteConfirmation.objects.get().status == "pending"


def test_a_stale_or_mismatched_payload_gets_the_failure_toast(
    webhook, telegram, admin, user, topic, clock
):
    prompt = _prompt(webhook, telegram, admin, topic)
    epoch = int(clock.now.timestamp())
    before = table_state()
    mismatched = [
        f"d:yes:{OTHER_ID}:{topic.thread_id}:{epoch}",  # another user
        f"d:yes:{USER_ID}:{topic.thread_id}:{epoch - 1}",  # another epoch
    ]
    card = topic.pinned_msg_id  # a message of the topic that is no prompt

    toasts = [click_in_group(webhook, telegram, admin, prompt.message_id, d) for d in mismatched]
    toasts.append(click_in_group(webhook, telegram, admin, card, prompt.yes))

    assert toasts == [texts.toast_deluser_failed()] * 3
    assert table_state() == before
    assert DeleteConfirmation.objects.get().status == "pending"


def test_a_binding_that_changed_since_the_prompt_is_not_deleted(
    webhook, telegram, admin, user, topic, clock
):
    prompt = _prompt(webhook, telegram, admin, topic)
    Topic.objects.filter(user_id=USER_ID).delete()  # e.g. a self-heal replaced the topic

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert toast == texts.toast_deluser_failed()
    assert DeleteConfirmation.objects.get().status == "pending"
    assert BotUser.objects.filter(user_id=USER_ID).count() == 1
    assert telegram.calls("deleteForumTopic") == []


def test_the_confirming_update_itself_requires_the_binding(
    webhook, telegram, admin, user, topic, monkeypatch
):
    # The binding goes between the early check and the confirming UPDATE: that UPDATE, which
    # re-checks it in the same statement, is what keeps the data.
    prompt = _prompt(webhook, telegram, admin, topic)
    Topic.objects.filter(user_id=USER_ID).delete()
    monkeypatch.setattr(deluser, "binding_exists", lambda **binding: True)
    telegram.forget_calls()

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert toast == texts.toast_deluser_failed()
    row = DeleteConfirmation.objects.get()
    assert (row.status, row.confirm_callback_id) == ("pending", None)
    assert BotUser.objects.filter(user_id=USER_ID).count() == 1
    assert RelayedMessage.objects.filter(user_id=USER_ID).count() == 2
    assert telegram.calls("deleteForumTopic") == []
    assert telegram.topic(topic.thread_id).deleted is False


def test_a_topic_already_deleted_by_hand_still_deletes_the_rows(
    webhook, telegram, admin, user, topic
):
    prompt = _prompt(webhook, telegram, admin, topic)
    telegram.delete_topic_by_hand(topic.thread_id)

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert toast == texts.toast_deluser_done()
    assert [call.status for call in telegram.calls("deleteForumTopic")] == [400]  # gone = fine
    assert _gail_rows() == GONE


def test_telegram_refusing_the_topic_deletion_keeps_the_data(webhook, telegram, admin, user, topic):
    prompt = _prompt(webhook, telegram, admin, topic)
    telegram.make_topic_undeletable(topic.thread_id)

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert toast == texts.toast_deluser_failed()
    assert _gail_rows() == KEPT
    assert telegram.topic(topic.thread_id).deleted is False


def test_deluser_in_a_topic_without_binding_gets_the_notice(webhook, telegram, admin):
    thread_id = telegram.create_topic_by_hand("by hand")

    webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="/deluser"))

    assert topic_texts(telegram, thread_id) == [texts.no_binding()]
    assert DeleteConfirmation.objects.count() == 0


def test_a_prompt_that_could_not_be_sent_is_sent_once_on_redelivery(
    webhook, telegram, admin, user, topic, clock, inbox
):
    update = telegram.group_message(admin, thread_id=topic.thread_id, text="/deluser")
    telegram.fail("sendMessage", status=502)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    assert DeleteConfirmation.objects.count() == 0
    inbox.later(seconds=60)

    assert topic_texts(telegram, topic.thread_id).count(texts.deluser_prompt(USER_ID)) == 1
    assert DeleteConfirmation.objects.count() == 1


def test_in_a_closed_topic_the_prompt_is_posted_in_general_and_its_buttons_work(
    webhook, telegram, admin, user, topic
):
    """Issue 36: the original's prompt went into the closed topic, which Telegram refuses, so
    /deluser there did nothing and said nothing."""
    webhook.deliver_ok(telegram.close_topic_by_hand(topic.thread_id, by=admin))

    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/deluser"))

    [prompt] = [
        message
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.thread_id is None  # General
    ]
    assert prompt.text == texts.closed_topic_reply(topic.thread_id, texts.deluser_prompt(USER_ID))
    assert DeleteConfirmation.objects.get().prompt_msg_id == prompt.message_id
    yes, _ = keyboard_data(prompt)

    assert click_in_group(webhook, telegram, admin, prompt.message_id, yes) == (
        texts.toast_deluser_done()
    )
    assert _gail_rows() == GONE


# ------------------------------------------------------------------ races and redeliveries


def test_the_winning_confirm_retried_after_a_failure_between_both_deletes_converges(
    webhook, telegram, admin, second_admin, user, topic, clock, inbox
):
    prompt = _prompt(webhook, telegram, admin, topic)
    click = group_click(telegram, admin, prompt.message_id, prompt.yes)
    callback_id = click["callback_query"]["id"]

    with deletes_refused("users"):
        webhook.deliver_ok(click)  # Telegram's side done, rows not: the worker retries it

    assert telegram.topic(topic.thread_id).deleted is True
    assert _gail_rows() == KEPT
    row = DeleteConfirmation.objects.get()
    assert (row.status, row.confirm_callback_id) == ("confirmed", callback_id)
    # Another click on the same prompt may not carry the deletion on.
    other = click_in_group(webhook, telegram, second_admin, prompt.message_id, prompt.yes)
    assert other == texts.toast_deluser_failed()
    assert _gail_rows() == KEPT

    inbox.later(seconds=61)  # the worker retries it (the window has passed by now)

    assert _gail_rows() == GONE
    assert telegram.callback_answer(callback_id) == texts.toast_deluser_done()
    # Telegram deleted the topic once; the retry's call finds it gone.
    assert [call.status for call in telegram.calls("deleteForumTopic")] == [200, 400]
    webhook.deliver_ok(click)  # a duplicate delivery does nothing more
    assert len(telegram.calls("deleteForumTopic")) == 2


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_confirms_exactly_one_wins(
    webhook, telegram, admin, second_admin, user, topic
):
    prompt = _prompt(webhook, telegram, admin, topic)
    first = group_click(telegram, admin, prompt.message_id, prompt.yes)
    second = group_click(telegram, second_admin, prompt.message_id, prompt.yes)

    responses = deliver_during_held_call(telegram, "deleteForumTopic", first, second)

    assert [response.status_code for response in responses] == [200, 200]
    assert telegram.callback_answer(first["callback_query"]["id"]) == texts.toast_deluser_done()
    assert telegram.callback_answer(second["callback_query"]["id"]) == (
        texts.toast_deluser_failed()
    )
    assert len(telegram.calls("deleteForumTopic")) == 1
    assert _gail_rows() == GONE


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_confirm_deletes_fails(webhook, telegram, admin, user, topic):
    prompt = _prompt(webhook, telegram, admin, topic)
    confirm = group_click(telegram, admin, prompt.message_id, prompt.yes)
    cancel = group_click(telegram, admin, prompt.message_id, prompt.no)

    deliver_during_held_call(telegram, "deleteForumTopic", confirm, cancel)

    assert telegram.callback_answer(cancel["callback_query"]["id"]) == texts.toast_deluser_failed()
    assert telegram.callback_answer(confirm["callback_query"]["id"]) == texts.toast_deluser_done()
    assert _gail_rows() == GONE


@pytest.mark.django_db(transaction=True)
def test_a_confirm_after_a_winning_cancel_deletes_nothing(webhook, telegram, admin, user, topic):
    prompt = _prompt(webhook, telegram, admin, topic)
    cancel = group_click(telegram, admin, prompt.message_id, prompt.no)
    confirm = group_click(telegram, admin, prompt.message_id, prompt.yes)

    # The cancel has decided (its UPDATE ran) and waits on its answer when the confirm lands.
    deliver_during_held_call(telegram, "answerCallbackQuery", cancel, confirm)

    assert telegram.callback_answer(cancel["callback_query"]["id"]) == texts.deluser_cancelled()
    assert telegram.callback_answer(confirm["callback_query"]["id"]) == (
        texts.toast_deluser_failed()
    )
    assert DeleteConfirmation.objects.get().status == "cancelled"
    assert _gail_rows() == KEPT
    assert telegram.calls("deleteForumTopic") == []
    assert dm_texts(telegram, user) == ["hi Gail"]


# ------------------------------------------------------------------ against the user's messages


def test_a_message_of_the_user_between_both_deletes_waits_and_the_deletion_converges(
    webhook, telegram, admin, user, topic, clock, inbox
):
    prompt = _prompt(webhook, telegram, admin, topic)
    click = group_click(telegram, admin, prompt.message_id, prompt.yes)
    with deletes_refused("users"):
        webhook.deliver_ok(click)  # Telegram's side done, rows not: the worker retries it
    telegram.forget_calls()

    # Gail writes now: her topic is gone in Telegram, her binding is still there. Replacing
    # the topic would give her a new binding, and the retried confirm would then find its
    # binding changed and keep all her data; her message waits in the inbox instead.
    message = telegram.private_message(user, text="are you there?")
    webhook.deliver_ok(message)

    assert telegram.calls() == []
    assert inbox.waiting() == [click["update_id"], message["update_id"]]
    assert _gail_rows() == KEPT
    inbox.later(seconds=61)  # the confirm's retry completes the deletion, then her message

    # Her message came in after the deletion: she is a stranger (a new profile, to verify).
    assert _gail_rows() == {"users": 1, "topics": 0, "messages": 0, "prompts": 0}
    assert telegram.callback_answer(click["callback_query"]["id"]) == texts.toast_deluser_done()
    assert inbox.waiting() == []
    assert BotUser.objects.get(user_id=user.id).first_seen_at == clock.now
    live = [t.thread_id for t in telegram.topics() if not t.deleted]
    bound = set(Topic.objects.values_list("thread_id", flat=True))
    assert set(live) == bound  # no topic without a binding (Olaf's, and Gail's if she got one)
    assert topic.thread_id not in bound
