"""/wipealldata (spec §4.10): the stateless warning, the checks of a click, first-click-wins,
broadcasts stopped, every bound topic deleted — and the rows removed only when every deletion
succeeded; re-running and Telegram's redelivery converge."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from celery import current_app as celery_current_app

from bots import texts
from bots.models import (
    Bot,
    BotUser,
    Broadcast,
    DeleteConfirmation,
    ProcessedUpdate,
    RelayedMessage,
    Setting,
    Topic,
)
from bots.pipeline import bulk
from bots.tasks import wipe_continue_task
from tests.bots.conftest import SECOND_ADMIN_ID, deliver_during_held_call
from tests.bots.helpers import (
    click_in_group,
    deletes_refused,
    general_texts,
    group_click,
    keyboard_data,
    make_user,
    open_conversation,
    set_switches,
)

PEOPLE = (7501, 7502, 7503)


@pytest.fixture
def second_admin(telegram):
    return telegram.user(SECOND_ADMIN_ID, "Sam")


@pytest.fixture
def topics(webhook, telegram, admin, clock) -> list[Topic]:
    """Three conversations, a note, a pending /deluser prompt, a broadcast draft and a running
    broadcast, a switch — and a topic made by hand that the bot never bound."""
    for number, user_id in enumerate(PEOPLE):
        person = telegram.user(user_id, f"Person {number}")
        open_conversation(webhook, telegram, person, bot_id=telegram.bot.id, now=clock.now)
    bindings = list(Topic.objects.order_by("thread_id"))
    webhook.deliver_ok(telegram.group_message(admin, thread_id=bindings[0].thread_id, text="hi"))
    Topic.objects.filter(user_id=PEOPLE[1]).update(note="VIP")
    DeleteConfirmation.objects.create(
        bot_id=telegram.bot.id,
        prompt_msg_id=1,
        user_id=PEOPLE[2],
        thread_id=bindings[2].thread_id,
        started_at=int(clock.now.timestamp()),
    )
    for update_id, status in ((1, "pending"), (2, "sending")):
        Broadcast.objects.create(
            bot_id=telegram.bot.id,
            source_update_id=update_id,
            initiator_user_id=admin.id,
            support_chat_id=telegram.support_chat_id,
            message_html="<b>news</b>",
            status=status,
            expires_at=clock.now + timedelta(minutes=5),
        )
    set_switches(verify_mode="button")
    telegram.create_topic_by_hand("made by hand")
    clock.advance(minutes=10)
    return bindings


@dataclass(frozen=True)
class Prompt:
    message_id: int
    yes: str
    no: str


def _prompt(webhook, telegram, admin, thread_id: int) -> Prompt:
    webhook.deliver_ok(telegram.group_message(admin, thread_id=thread_id, text="/wipealldata"))
    message = telegram.topic_messages(thread_id)[-1]
    yes, no = keyboard_data(message)
    return Prompt(message.message_id, yes, no)


def _rows() -> dict:
    return {
        "users": BotUser.objects.count(),
        "topics": Topic.objects.count(),
        "messages": RelayedMessage.objects.count(),
        "delete_confirmations": DeleteConfirmation.objects.count(),
        "broadcasts": Broadcast.objects.count(),
    }


ALL_KEPT = {"users": 3, "topics": 3, "messages": 4, "delete_confirmations": 1, "broadcasts": 2}
WIPED = dict.fromkeys(ALL_KEPT, 0)


def _kept_tables() -> tuple:
    return (
        dict(Setting.objects.values_list("key", "value")),
        set(ProcessedUpdate.objects.values_list("update_id", flat=True)),
        list(Bot.objects.values_list("bot_id", flat=True)),
    )


def test_the_command_sends_the_warning_with_two_buttons_and_writes_nothing(
    webhook, telegram, admin, topics, clock
):
    before = _rows()
    telegram.forget_calls()

    _prompt(webhook, telegram, admin, topics[0].thread_id)

    epoch = int(clock.now.timestamp())
    [call] = telegram.calls()
    assert call.params == {
        "chat_id": telegram.support_chat_id,
        "message_thread_id": topics[0].thread_id,
        "text": texts.wipe_warning(),
        "reply_markup": {
            "inline_keyboard": [
                [{"text": "⚠️ 确认清空", "callback_data": f"w:yes:{epoch}"}],
                [{"text": "取消", "callback_data": f"w:no:{epoch}"}],
            ]
        },
    }
    assert texts.wipe_warning().startswith("⚠️ 危险操作：清空全部数据\n将删除：")
    assert _rows() == before


def test_confirm_deletes_every_bound_topic_then_every_row(webhook, telegram, admin, topics, clock):
    prompt = _prompt(webhook, telegram, admin, topics[1].thread_id)
    kept = _kept_tables()
    telegram.forget_calls()

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert toast == texts.toast_wiping() == "已确认，正在清空……"
    deletions = telegram.calls("deleteForumTopic")
    assert [call.params["message_thread_id"] for call in deletions] == [
        topic.thread_id for topic in topics
    ]
    assert [call.status for call in deletions] == [200, 200, 200]
    assert _rows() == WIPED
    settings_after, updates_after, bots_after = _kept_tables()
    settings_before, updates_before, bots_before = kept
    # settings, processed_updates (plus the click's own claim) and bots are kept.
    assert (settings_after, bots_after) == (settings_before, bots_before)
    assert updates_after - updates_before == {len(updates_before) and max(updates_after)}
    assert [topic.deleted for topic in telegram.topics()] == [True, True, True, False]
    assert general_texts(telegram) == [texts.wipe_done()]
    assert texts.wipe_done() == "全部话题和数据已删除。"


def test_a_failed_topic_deletion_keeps_every_row_and_a_rerun_converges(
    webhook, telegram, admin, topics, clock
):
    stubborn = topics[2].thread_id
    telegram.make_topic_undeletable(stubborn)
    prompt = _prompt(webhook, telegram, admin, stubborn)

    assert click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes) == (
        texts.toast_wiping()
    )

    assert _rows() == ALL_KEPT
    assert general_texts(telegram) == [texts.wipe_failed(1)]
    assert texts.wipe_failed(1) == (
        "⚠️ 1 个话题删除失败，数据未清空。请检查机器人的权限后再次发送 /wipealldata。"
    )
    # The broadcasts were stopped before the topics went.
    assert list(
        Broadcast.objects.order_by("source_update_id").values_list("status", flat=True)
    ) == [
        "cancelled",
        "failed",
    ]
    assert [telegram.topic(topic.thread_id).deleted for topic in topics] == [True, True, False]

    telegram.topic(stubborn).undeletable = False  # the admins fixed the bot's rights
    clock.advance(minutes=2)
    prompt = _prompt(webhook, telegram, admin, stubborn)
    telegram.forget_calls()
    click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert [call.status for call in telegram.calls("deleteForumTopic")] == [400, 400, 200]
    assert _rows() == WIPED
    assert general_texts(telegram) == [texts.wipe_failed(1), texts.wipe_done()]


@pytest.mark.parametrize(("seconds", "wiped"), [(60, True), (61, False), (-5, True), (-6, False)])
def test_the_window_is_sixty_seconds_with_five_seconds_of_skew(
    seconds, wiped, webhook, telegram, admin, topics, clock
):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    clock.advance(seconds=seconds)

    toast = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    if wiped:
        assert toast == texts.toast_wiping()
        assert _rows() == WIPED
    else:
        assert toast == texts.toast_wipe_timeout()
        assert _rows() == ALL_KEPT
        assert telegram.calls("deleteForumTopic") == []
        shown = telegram.message(telegram.support_chat_id, prompt.message_id)
        assert (shown.text, shown.reply_markup) == (
            f"{texts.wipe_warning()}\n\n{texts.toast_wipe_timeout()}",
            None,
        )


def test_cancel_wipes_nothing_and_the_prompt_cannot_be_confirmed_afterwards(
    webhook, telegram, admin, topics
):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)

    cancelled = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.no)
    confirmed = click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes)

    assert cancelled == texts.toast_wipe_cancelled() == "已取消，未清空任何数据。"
    assert confirmed == texts.toast_wipe_already_decided()
    assert _rows() == ALL_KEPT
    assert telegram.calls("deleteForumTopic") == []
    shown = telegram.message(telegram.support_chat_id, prompt.message_id)
    assert (shown.text, shown.reply_markup) == (
        f"{texts.wipe_warning()}\n\n{texts.toast_wipe_cancelled()}",
        None,
    )


def test_a_non_admin_click_gets_admins_only_and_writes_nothing(
    webhook, telegram, admin, member, topics
):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)

    toast = click_in_group(webhook, telegram, member, prompt.message_id, prompt.yes)

    assert toast == texts.admins_only()
    assert _rows() == ALL_KEPT
    assert Broadcast.objects.filter(status__in=["pending", "sending"]).count() == 2
    # The prompt is still undecided: an admin can still confirm it.
    assert click_in_group(webhook, telegram, admin, prompt.message_id, prompt.yes) == (
        texts.toast_wiping()
    )


def test_forged_or_foreign_payloads_and_other_chats_are_silent(
    webhook, telegram, admin, topics, clock
):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    epoch = int(clock.now.timestamp())
    telegram.forget_calls()

    for data in (
        f"w:maybe:{epoch}",
        f"w:yes:{epoch}:1",
        "w:yes:",
        f"w:yes:{'1' * 13}",
        "x:1",  # (b:… goes to the broadcast buttons: tests/bots/broadcast/)
    ):
        webhook.deliver_ok(group_click(telegram, admin, prompt.message_id, data))
    webhook.deliver_ok(
        telegram.click(admin, message_id=prompt.message_id, data=prompt.yes, chat_id=-1007777)
    )

    assert telegram.calls() == []
    assert _rows() == ALL_KEPT


# ------------------------------------------------------------------ races and redeliveries


def test_the_winning_confirm_retried_after_a_failure_between_both_deletes_converges(
    webhook, telegram, admin, second_admin, topics, clock, inbox
):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    click = group_click(telegram, admin, prompt.message_id, prompt.yes)

    with deletes_refused("users"):
        webhook.deliver_ok(click)  # the topics deleted, the rows not: the worker retries it

    assert [telegram.topic(topic.thread_id).deleted for topic in topics] == [True, True, True]
    assert _rows() == ALL_KEPT
    other = click_in_group(webhook, telegram, second_admin, prompt.message_id, prompt.yes)
    assert other == texts.toast_wipe_already_decided()

    inbox.later(seconds=61)  # past the window: the retry resumes all the same

    assert _rows() == WIPED
    assert [call.status for call in telegram.calls("deleteForumTopic")] == [200] * 3 + [400] * 3
    assert general_texts(telegram) == [texts.wipe_done()]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_confirms_run_one_wipe(webhook, telegram, admin, second_admin, topics):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    first = group_click(telegram, admin, prompt.message_id, prompt.yes)
    second = group_click(telegram, second_admin, prompt.message_id, prompt.yes)

    deliver_during_held_call(telegram, "deleteForumTopic", first, second)

    assert telegram.callback_answer(first["callback_query"]["id"]) == texts.toast_wiping()
    assert telegram.callback_answer(second["callback_query"]["id"]) == (
        texts.toast_wipe_already_decided()
    )
    assert len(telegram.calls("deleteForumTopic")) == 3
    assert _rows() == WIPED


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_wipe_runs_fails(webhook, telegram, admin, topics):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    confirm = group_click(telegram, admin, prompt.message_id, prompt.yes)
    cancel = group_click(telegram, admin, prompt.message_id, prompt.no)

    deliver_during_held_call(telegram, "deleteForumTopic", confirm, cancel)

    assert telegram.callback_answer(cancel["callback_query"]["id"]) == (
        texts.toast_wipe_already_decided()
    )
    assert _rows() == WIPED


@pytest.mark.django_db(transaction=True)
def test_a_confirm_after_a_winning_cancel_wipes_nothing(webhook, telegram, admin, topics):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    cancel = group_click(telegram, admin, prompt.message_id, prompt.no)
    confirm = group_click(telegram, admin, prompt.message_id, prompt.yes)

    deliver_during_held_call(telegram, "answerCallbackQuery", cancel, confirm)

    assert telegram.callback_answer(cancel["callback_query"]["id"]) == texts.toast_wipe_cancelled()
    assert telegram.callback_answer(confirm["callback_query"]["id"]) == (
        texts.toast_wipe_already_decided()
    )
    assert _rows() == ALL_KEPT
    assert telegram.calls("deleteForumTopic") == []


# ------------------------------------------------------------------ against inbound and late work


@pytest.mark.django_db(transaction=True)
def test_a_user_writing_mid_wipe_waits_for_its_end_and_no_topic_is_left_unbound(
    webhook, telegram, admin, topics, clock, inbox
):
    latecomer = telegram.user(7600, "Late")
    make_user(latecomer, bot_id=telegram.bot.id, now=clock.now)  # verified, no topic yet
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    confirm = group_click(telegram, admin, prompt.message_id, prompt.yes)
    message = telegram.private_message(latecomer, text="hello?")

    wiped, waited = deliver_during_held_call(telegram, "deleteForumTopic", confirm, message)

    # The message came while the wipe deleted topics: a topic for it would outlive the wipe
    # (its binding deleted with the rows, the topic left in the group); it waits in the inbox.
    assert (wiped.status_code, waited.status_code) == (200, 200)
    assert inbox.waiting() == [message["update_id"]]
    assert telegram.calls("createForumTopic")[3:] == []  # the three of the fixture only
    assert _rows() == WIPED
    assert general_texts(telegram) == [texts.wipe_done()]
    assert [t.name for t in telegram.topics() if not t.deleted] == ["made by hand"]

    inbox.later(seconds=5)  # the worker takes it after the wipe: nothing was lost
    assert inbox.waiting() == []

    assert BotUser.objects.filter(user_id=latecomer.id).exists()  # a stranger again
    live = {t.thread_id for t in telegram.topics() if not t.deleted and t.name != "made by hand"}
    assert live == set(Topic.objects.values_list("thread_id", flat=True))


def test_a_late_redelivery_of_the_confirm_after_the_wipe_ended_wipes_nothing_new(
    webhook, telegram, admin, topics, clock
):
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    confirm = group_click(telegram, admin, prompt.message_id, prompt.yes)
    webhook.deliver_ok(confirm)
    assert _rows() == WIPED
    # Life goes on: somebody writes and gets a topic.
    newcomer = telegram.user(7601, "New")
    fresh = open_conversation(webhook, telegram, newcomer, bot_id=telegram.bot.id, now=clock.now)
    # The confirm's update comes again (its claim was lost, say).
    ProcessedUpdate.objects.filter(update_id=confirm["update_id"]).delete()
    clock.advance(seconds=61)

    answer = webhook.deliver(confirm)

    assert answer.status_code == 200
    assert telegram.topic(fresh.thread_id).deleted is False
    assert list(Topic.objects.values_list("user_id", flat=True)) == [newcomer.id]
    assert general_texts(telegram) == [texts.wipe_done()]


def test_a_late_copy_of_a_wipe_chunk_after_the_wipe_ended_deletes_nothing(
    webhook, telegram, admin, topics, clock, monkeypatch
):
    queued = []
    monkeypatch.setattr(
        celery_current_app, "send_task", lambda name, kwargs, **options: queued.append(kwargs)
    )
    monkeypatch.setattr(bulk, "INLINE_BUDGET_SECONDS", 0.0)  # every topic in the worker
    prompt = _prompt(webhook, telegram, admin, topics[0].thread_id)
    webhook.deliver_ok(group_click(telegram, admin, prompt.message_id, prompt.yes))
    [chunk] = queued
    assert wipe_continue_task(**chunk) == texts.wipe_done()
    assert _rows() == WIPED
    newcomer = telegram.user(7601, "New")
    fresh = open_conversation(webhook, telegram, newcomer, bot_id=telegram.bot.id, now=clock.now)

    # Celery delivers the same chunk again (its worker died before acknowledging it).
    assert wipe_continue_task(**chunk) is None

    assert telegram.topic(fresh.thread_id).deleted is False
    assert list(Topic.objects.values_list("user_id", flat=True)) == [newcomer.id]
    assert general_texts(telegram)[-1] == texts.wipe_done()
    assert general_texts(telegram).count(texts.wipe_done()) == 1
