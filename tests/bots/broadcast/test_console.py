"""The operators' console over broadcasts (Django admin): what is in progress, and stopping one
through the state machine's own service — against the fake Bot API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from bots import texts
from bots.models import Broadcast
from bots.services.broadcast_progress import in_flight_clear, in_flight_mark
from proxy.services.admin_users import admin_user_create_default
from tests.bots.broadcast.helpers import (
    control_text,
    make_broadcast,
    people_broadcast,
    row,
    run_loop,
    start_draft,
)
from tests.bots.conftest import START
from tests.fakes.telegram import BOT_ID

BROADCASTS = reverse("admin:bots_broadcast_changelist")


@pytest.fixture
def operator(client, db):
    client.force_login(admin_user_create_default(password="a long operator pass 42", now=START))
    return client


def _stop(operator, *ids: int) -> list[str]:
    response = operator.post(
        BROADCASTS,
        {"action": "stop_broadcasts", "_selected_action": [str(pk) for pk in ids]},
        follow=True,
    )
    assert response.status_code == 200
    return [str(message) for message in response.context["messages"]]


def test_the_list_shows_what_is_in_progress_and_who_started_it(
    operator, webhook, telegram, admin, people, clock
):
    running = people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        success_count=1,
        failure_count=1,
    )
    draft = start_draft(webhook, telegram, admin)
    make_broadcast(  # another bot's: never listed
        telegram, initiator=admin, now=clock.now, status="sending", bot_id=BOT_ID + 1
    )

    response = operator.get(BROADCASTS)

    shown = [
        (item.id, item.status, item.initiator_user_id, item.success_count, item.failure_count)
        for item in response.context["cl"].result_list
    ]
    assert shown == [
        (draft.broadcast_id, "pending", admin.id, 0, 0),
        (running.id, "sending", admin.id, 1, 1),
    ]
    page = response.content.decode()
    assert page.count('<td class="field-remaining_recipients">1</td>') == 1  # the running one
    assert page.count('<td class="field-remaining_recipients">—</td>') == 1  # the draft
    assert operator.get(reverse("admin:bots_broadcast_add")).status_code == 403


def test_the_send_in_flight_is_shown_apart_from_the_failures(
    operator, telegram, admin, people, clock
):
    # Five recipients: one got it, one failed, the third's send is in flight (claimed, so
    # counted as a failure on the row until its outcome is recorded).
    running = make_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        recipients=[6001, 6002, 6003, 6004, 6005],
        success_count=1,
        failure_count=2,
    )
    in_flight_mark(broadcast_id=running.id, index=2, successes=1)

    page = operator.get(BROADCASTS).content.decode()

    assert '<td class="field-success_count">1</td>' in page
    assert '<td class="field-failed">1</td>' in page
    assert '<td class="field-in_flight">1</td>' in page
    assert '<td class="field-remaining_recipients">2</td>' in page

    in_flight_clear(broadcast_id=running.id)  # its outcome was recorded: a failure
    page = operator.get(BROADCASTS).content.decode()

    assert '<td class="field-failed">2</td>' in page
    assert '<td class="field-in_flight">0</td>' in page


def test_stopping_a_draft_cancels_it_and_its_control_message_says_so(
    operator, webhook, telegram, admin, people
):
    draft = start_draft(webhook, telegram, admin)

    assert _stop(operator, draft.broadcast_id) == [f"Cancelled: {draft.broadcast_id}."]

    control = telegram.message(telegram.support_chat_id, draft.message.message_id)
    assert (control.text, control.reply_markup) == (texts.broadcast_cancelled(), None)
    assert Broadcast.objects.count() == 0


def test_stopping_a_draft_without_a_configured_bot_changes_only_the_row(
    operator, webhook, telegram, admin, people, bot_settings
):
    draft = start_draft(webhook, telegram, admin)
    bot_settings.TELEGRAM_BOT_TOKEN = None

    assert (
        _stop(operator, draft.broadcast_id)
        == [
            f"Cancelled: {draft.broadcast_id}.",
            f"Broadcast {draft.broadcast_id}: its message in General is not updated "
            "(the bot is not configured (TELEGRAM_BOT_TOKEN, SUPPORT_CHAT_ID)).",
        ][::-1]
    )
    assert row(draft.broadcast_id).status == "cancelled"
    assert telegram.message(telegram.support_chat_id, draft.message.message_id).text == (
        texts.broadcast_control(3)
    )


def test_stopping_a_running_send_fails_it_and_its_next_run_shows_what_was_sent(
    operator, telegram, admin, people, clock
):
    running = people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        success_count=1,
    )

    assert _stop(operator, running.id) == [
        f"Stopping: {running.id} — the send stops before its next recipient and its message "
        "in General shows what was sent."
    ]
    assert row(running.id).status == "failed"

    assert run_loop(running.id) == "stopped"  # the loop's next step, or the sweep's run

    assert telegram.calls("sendMessage") == []
    text = control_text(telegram, running)
    assert text == texts.broadcast_interrupted(sent=1, failed=0, remaining=2)


def test_a_broadcast_that_ended_meanwhile_is_not_stopped(operator, telegram, admin, people, clock):
    done = make_broadcast(telegram, initiator=admin, now=clock.now, status="completed")

    assert _stop(operator, done.id) == [f"Not in progress any more: {done.id}."]
    assert row(done.id).status == "completed"
