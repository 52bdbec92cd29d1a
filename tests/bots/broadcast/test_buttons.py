"""The control message's buttons (spec §7.5): who may press them, cancel, expiry, confirm, busy,
redelivery, lazy cleanup and the completed-repair path — against the fake Bot API. The send loop
itself is not run here (its run is queued on commit: ``on_commit`` shows it)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from bots import texts
from bots.models import BotUser, Broadcast, ProcessedUpdate
from bots.services.broadcast_progress import sender_lease_take
from tests.bots.broadcast.helpers import (
    Control,
    click,
    control_text,
    eligible_users,
    general_messages,
    make_broadcast,
    people_broadcast,
    received,
    row,
    run_loop,
    start_draft,
)
from tests.bots.conftest import SECOND_ADMIN_ID

NO_BUTTONS = None  # how the fake stores a message whose keyboard was removed


@pytest.fixture
def second_admin(telegram):
    return telegram.user(SECOND_ADMIN_ID, "Sam")


@pytest.fixture
def draft(webhook, telegram, admin, people):
    return start_draft(webhook, telegram, admin)


def _control(telegram, control):
    return telegram.message(telegram.support_chat_id, control.message.message_id)


def _users_got_nothing(telegram, people) -> bool:
    return all(received(telegram, person) == [] for person in people)


# ------------------------------------------------------------------ who may press


def test_a_member_who_is_not_an_admin_gets_admins_only(webhook, telegram, member, draft):
    telegram.forget_calls()

    toast = click(webhook, telegram, member, draft, draft.confirm)

    assert toast == texts.admins_only()
    assert [call.method for call in telegram.calls()] == ["answerCallbackQuery"]
    assert row(draft.broadcast_id).status == "pending"


def test_another_admin_cannot_confirm_or_cancel(webhook, telegram, second_admin, draft):
    telegram.forget_calls()

    assert click(webhook, telegram, second_admin, draft, draft.confirm) == (
        texts.toast_broadcast_not_initiator()
    )
    assert click(webhook, telegram, second_admin, draft, draft.cancel) == (
        "只有发起广播的管理员可以确认或取消。"
    )
    assert [call.method for call in telegram.calls()] == ["answerCallbackQuery"] * 2
    assert row(draft.broadcast_id).status == "pending"
    assert _control(telegram, draft).text == texts.broadcast_control(3)


@pytest.mark.parametrize(
    "data", ["b:y:0", "b:y:12345678901", "b:x:1", "b:y:", "b:y:1:2", "b:yes:1", "b:y:-1"]
)
def test_malformed_payloads_are_silent(data, webhook, telegram, admin, draft):
    telegram.forget_calls()

    click(webhook, telegram, admin, draft, data)

    assert telegram.calls() == []
    assert row(draft.broadcast_id).status == "pending"


def test_a_click_from_another_chat_is_silent(webhook, telegram, admin, draft):
    telegram.forget_calls()
    update = telegram.click(
        admin, message_id=draft.message.message_id, data=draft.confirm, chat_id=-1009999
    )

    webhook.deliver_ok(update)

    assert telegram.calls() == []
    assert row(draft.broadcast_id).status == "pending"


def test_buttons_under_another_message_or_of_a_gone_broadcast_are_already_handled(
    webhook, telegram, admin, draft
):
    preview = general_messages(telegram)[0]
    update = telegram.click(
        admin, message_id=preview.message_id, data=draft.confirm, chat_id=telegram.support_chat_id
    )
    webhook.deliver_ok(update)
    assert telegram.callback_answer(update["callback_query"]["id"]) == (
        texts.toast_broadcast_missing()
    )

    assert click(webhook, telegram, admin, draft, "b:y:999999") == texts.toast_broadcast_missing()
    assert row(draft.broadcast_id).status == "pending"


# ------------------------------------------------------------------ cancel and expiry


def test_the_initiator_cancels_before_confirming(webhook, telegram, admin, people, draft):
    toast = click(webhook, telegram, admin, draft, draft.cancel)

    assert toast == texts.toast_broadcast_cancelled()
    control = _control(telegram, draft)
    assert (control.text, control.reply_markup) == ("🚫 广播已取消（未发送）。", NO_BUTTONS)
    assert Broadcast.objects.count() == 0
    assert _users_got_nothing(telegram, people)
    # A second click on the (now button-less) message finds nothing.
    assert click(webhook, telegram, admin, draft, draft.confirm) == texts.toast_broadcast_missing()


def test_the_preview_is_confirmable_for_five_minutes(
    webhook, telegram, admin, draft, clock, django_capture_on_commit_callbacks
):
    clock.advance(minutes=4, seconds=59)

    with django_capture_on_commit_callbacks() as queued:
        assert click(webhook, telegram, admin, draft, draft.confirm) == (
            texts.toast_broadcast_confirmed()
        )

    assert len(queued) == 1
    assert row(draft.broadcast_id).status == "sending"


@pytest.mark.parametrize("button", ["confirm", "cancel"])
def test_after_five_minutes_the_preview_has_expired(
    button, webhook, telegram, admin, people, draft, clock, django_capture_on_commit_callbacks
):
    clock.advance(minutes=5)

    with django_capture_on_commit_callbacks() as queued:
        toast = click(webhook, telegram, admin, draft, getattr(draft, button))

    assert toast == texts.toast_broadcast_expired()
    assert toast == "预览已过期，请重新发起广播。"
    control = _control(telegram, draft)
    assert (control.text, control.reply_markup) == (texts.broadcast_expired(), NO_BUTTONS)
    assert Broadcast.objects.count() == 0
    assert queued == []
    assert _users_got_nothing(telegram, people)


def test_a_new_broadcast_cleans_up_an_expired_draft_first(webhook, telegram, admin, draft, clock):
    clock.advance(minutes=6)

    second = start_draft(webhook, telegram, admin, "/broadcast Second\nbody")

    assert _control(telegram, draft).text == texts.broadcast_expired()
    assert list(Broadcast.objects.values_list("id", "status")) == [(second.broadcast_id, "pending")]


def test_a_cancel_whose_edit_failed_is_finished_by_the_redelivery(
    webhook, telegram, admin, draft, clock, inbox
):
    update = telegram.click(
        admin,
        message_id=draft.message.message_id,
        data=draft.cancel,
        chat_id=telegram.support_chat_id,
    )
    telegram.fail("editMessageText", status=502)

    webhook.deliver_ok(update)  # stored: the inbox's worker retries it
    assert row(draft.broadcast_id).status == "cancelled"

    inbox.later(seconds=60)

    assert _control(telegram, draft).text == texts.broadcast_cancelled()
    assert Broadcast.objects.count() == 0


# ------------------------------------------------------------------ confirm


def test_the_confirm_freezes_the_recipients_and_queues_the_send_loop(
    webhook, telegram, admin, people, draft, clock, django_capture_on_commit_callbacks
):
    eligible_users(telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=[6000])  # joins late
    telegram.forget_calls()

    with django_capture_on_commit_callbacks() as queued:
        toast = click(webhook, telegram, admin, draft, draft.confirm)

    assert toast == texts.toast_broadcast_confirmed()
    assert len(queued) == 1  # the send loop's first run, queued once the UPDATE is committed
    broadcast = row(draft.broadcast_id)
    assert (
        broadcast.status,
        json.loads(broadcast.recipient_ids_json),
        broadcast.expected_count,
        broadcast.confirmed_at,
        broadcast.success_count,
        broadcast.failure_count,
    ) == ("sending", [6000, 6001, 6002, 6003], 4, clock.now, 0, 0)
    # The webhook answered at once: the click's answer and nothing sent to anybody.
    assert [call.method for call in telegram.calls()] == ["answerCallbackQuery"]
    assert _users_got_nothing(telegram, people)


def test_a_confirm_with_nobody_left_to_send_to_cancels(webhook, telegram, admin, people, draft):
    BotUser.objects.update(is_banned=True)

    toast = click(webhook, telegram, admin, draft, draft.confirm)

    assert toast == texts.broadcast_nobody_to_send()
    assert _control(telegram, draft).text == "没有可发送的用户，广播已取消（未发送）。"
    assert Broadcast.objects.count() == 0


def test_a_confirm_with_more_users_than_the_cap_cancels(
    webhook, telegram, admin, people, draft, bot_settings
):
    bot_settings.BROADCAST_MAX_RECIPIENTS = "2"

    toast = click(webhook, telegram, admin, draft, draft.confirm)

    assert toast == texts.broadcast_too_many_to_send(2)
    assert _control(telegram, draft).text == "可发送的用户超过 2 人，广播已取消（未发送）。"
    assert Broadcast.objects.count() == 0


def test_a_confirm_while_another_broadcast_sends_is_busy_and_the_draft_stays(
    webhook, telegram, admin, people, clock, django_capture_on_commit_callbacks
):
    running = make_broadcast(telegram, initiator=admin, now=clock.now, status="sending")
    draft = start_draft(webhook, telegram, admin)

    with django_capture_on_commit_callbacks() as queued:
        toast = click(webhook, telegram, admin, draft, draft.confirm)

    assert toast == texts.toast_broadcast_busy()
    assert dict(Broadcast.objects.values_list("id", "status")) == {
        running.id: "sending",
        draft.broadcast_id: "pending",
    }
    assert queued == []
    assert _control(telegram, draft).text == texts.broadcast_control(3)  # buttons still there


def test_a_click_while_sending_says_wait_and_starts_nothing_more(
    webhook, telegram, admin, draft, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        click(webhook, telegram, admin, draft, draft.confirm)
    sender_lease_take(broadcast_id=draft.broadcast_id, token=None, ttl_seconds=30)  # it runs

    with django_capture_on_commit_callbacks() as queued_again:
        assert click(webhook, telegram, admin, draft, draft.confirm) == (
            texts.toast_broadcast_sending()
        )
        assert click(webhook, telegram, admin, draft, draft.cancel) == "正在发送，请稍候。"

    assert (len(queued), queued_again) == (1, [])
    assert row(draft.broadcast_id).status == "sending"


def test_a_confirm_redelivered_after_a_crash_resumes_one_send_loop(
    webhook, telegram, admin, people, draft, clock, django_capture_on_commit_callbacks
):
    update = telegram.click(
        admin,
        message_id=draft.message.message_id,
        data=draft.confirm,
        chat_id=telegram.support_chat_id,
    )
    with django_capture_on_commit_callbacks() as first:
        webhook.deliver_ok(update)
    # The webhook's process died right after the UPDATE: its run never reached the queue, and
    # the claim stayed "processing" — Telegram redelivers the click a minute later.
    ProcessedUpdate.objects.filter(update_id=update["update_id"]).update(
        status="processing", created_at=clock.now
    )
    frozen = row(draft.broadcast_id)
    clock.advance(seconds=61)

    with django_capture_on_commit_callbacks() as second:
        webhook.deliver_ok(update)

    assert (len(first), len(second)) == (1, 1)  # the redelivery queued the run that was lost
    again = row(draft.broadcast_id)
    assert (again.status, again.recipient_ids_json, again.confirmed_at) == (
        "sending",
        frozen.recipient_ids_json,
        frozen.confirmed_at,
    )
    # Both runs reach the worker (the lost one was only delayed): one loop sends, once.
    assert run_loop(draft.broadcast_id) == "completed"
    assert run_loop(draft.broadcast_id) == "gone"
    assert [len(received(telegram, person)) for person in people] == [1, 1, 1]


# ------------------------------------------------------------------ lazy cleanup and repair


def _stale_send(telegram, admin, clock) -> Broadcast:
    return people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        success_count=1,
        failure_count=1,
        updated_at=clock.now - timedelta(minutes=10),
    )


def test_a_stale_send_is_failed_shown_and_deleted_by_the_next_click(
    webhook, telegram, admin, people, clock
):
    stale = _stale_send(telegram, admin, clock)
    elsewhere = Control(
        message=telegram.message(telegram.support_chat_id, stale.preview_msg_id),
        confirm="b:y:999999999",
        cancel="b:n:999999999",
    )

    toast = click(webhook, telegram, admin, elsewhere, elsewhere.confirm)

    assert toast == texts.toast_broadcast_missing()
    text = control_text(telegram, stale)
    assert text == texts.broadcast_interrupted(sent=1, failed=1, remaining=1)
    assert text == "⚠️ 广播已中断：已发送 1，失败 1，未发送 1；不会自动补发。"
    assert Broadcast.objects.count() == 0


def test_a_stale_send_is_cleaned_up_before_a_new_broadcast(webhook, telegram, admin, people, clock):
    stale = _stale_send(telegram, admin, clock)

    draft = start_draft(webhook, telegram, admin)

    text = control_text(telegram, stale)
    assert text == texts.broadcast_interrupted(sent=1, failed=1, remaining=1)
    assert list(Broadcast.objects.values_list("id", flat=True)) == [draft.broadcast_id]


def test_a_sending_row_younger_than_ten_minutes_is_not_stale(
    webhook, telegram, admin, people, clock
):
    running = make_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        updated_at=clock.now - timedelta(minutes=9, seconds=59),
    )

    start_draft(webhook, telegram, admin)

    assert row(running.id).status == "sending"


def test_a_completed_broadcast_whose_statistics_were_not_shown_is_repaired_by_a_click(
    webhook, telegram, admin, people, clock
):
    done = people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="completed",
        success_count=2,
        failure_count=1,
    )
    telegram.forget_calls()
    control = Control(
        message=telegram.message(telegram.support_chat_id, done.control_msg_id),
        confirm=f"b:y:{done.id}",
        cancel=f"b:n:{done.id}",
    )

    toast = click(webhook, telegram, admin, control, control.confirm)

    assert toast == texts.toast_broadcast_completed()
    assert control_text(telegram, done) == (
        "✅ 广播完成：成功 2，失败 1\n（成功 = Telegram 已接收，不代表已读；失败的不会重发）"
    )
    assert Broadcast.objects.count() == 0
    assert telegram.calls("sendMessage") == []  # nothing resent
