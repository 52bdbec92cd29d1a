"""A broadcast's outcome in the audit trail (issue #24): the confirm's row says "started", and
the end — completed by the send loop, stopped from the console or by /wipealldata while
sending, interrupted (no heartbeat) — adds exactly one outcome row with the counts, even when
the loop runs again after the end (a final edit that failed, a resumed loop)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from bots import texts
from bots.models import AdminAuditEntry
from proxy.services.admin_users import admin_user_create_default
from tests.bots.broadcast.helpers import (
    click,
    control_text,
    people_broadcast,
    received,
    row,
    run_loop,
    start_draft,
    take_queued_runs,
)
from tests.bots.conftest import ADMIN_ID, START
from tests.bots.helpers import click_in_group, keyboard_data, open_conversation

ALICE = ("telegram", ADMIN_ID, "@alice_support")


def _rows() -> list[tuple]:
    return list(
        AdminAuditEntry.objects.filter(action="broadcast")
        .order_by("id")
        .values_list("surface", "actor_id", "actor_name", "outcome", "detail")
    )


@pytest.fixture
def confirmed(webhook, telegram, admin, people, django_capture_on_commit_callbacks):
    """A broadcast to the three ``people``, confirmed by Alice (its first run not run yet)."""
    control = start_draft(webhook, telegram, admin)
    with django_capture_on_commit_callbacks():
        click(webhook, telegram, admin, control, control.confirm)
    return control


@pytest.fixture
def operator(client, db):
    admin_user = admin_user_create_default(password="a long operator passphrase 7", now=START)
    client.force_login(admin_user)
    client.username = str(admin_user)  # the log-in name the audit trail records
    return client


def test_a_completed_broadcast_adds_its_outcome_with_the_counts_for_the_admin_who_confirmed(
    telegram, people, confirmed
):
    telegram.block(people[1].id)  # that send fails (403): a failure, never retried

    assert run_loop(confirmed.broadcast_id) == "completed"

    started = f"broadcast {confirmed.broadcast_id}: 3 recipients"
    done = f"broadcast {confirmed.broadcast_id}: completed: sent 2, failed 1, not sent 0 of 3"
    assert _rows() == [(*ALICE, "started", started), (*ALICE, "done", done)]


def test_a_run_after_the_end_adds_no_second_outcome(telegram, people, confirmed, redis_client):
    telegram.fail_call(5, status=502)  # progress edit, three sends, then the final edit fails
    assert run_loop(confirmed.broadcast_id) == "continues"
    assert row(confirmed.broadcast_id).status == "completed"
    [next_run] = take_queued_runs(redis_client)

    assert run_loop(next_run) == "completed"  # shows the statistics, deletes the row

    shown = telegram.message(telegram.support_chat_id, confirmed.message.message_id).text
    assert shown == texts.broadcast_done(sent=3, failed=0)
    assert [outcome for *_, outcome, _ in _rows()] == ["started", "done"]


def test_a_broadcast_resumed_after_its_loop_died_has_one_outcome(telegram, admin, people, clock):
    # A loop sent to the first recipient, claimed the second and died during that send; the
    # resumed loop finishes it — twice over, as a redelivered task would.
    crashed = people_broadcast(
        telegram, initiator=admin, now=clock.now, status="sending", success_count=1, failure_count=1
    )

    assert run_loop(crashed.id) == "completed"
    assert run_loop(crashed.id) == "gone"

    assert _rows() == [
        (
            "telegram",
            ADMIN_ID,
            "",  # its confirm's row is not in the trail: the id alone names the admin
            "done",
            f"broadcast {crashed.id}: completed: sent 2, failed 1, not sent 0 of 3",
        )
    ]


def test_stopping_a_running_broadcast_in_the_console_is_its_outcome_with_the_counts(
    operator, telegram, admin, people, clock
):
    running = people_broadcast(
        telegram, initiator=admin, now=clock.now, status="sending", success_count=1, failure_count=1
    )

    operator.post(
        reverse("admin:bots_broadcast_changelist"),
        {"action": "stop_broadcasts", "_selected_action": [str(running.id)]},
    )
    # The loop stops before its next recipient and shows the end.
    assert run_loop(running.id) == "stopped"
    assert run_loop(running.id) == "gone"

    assert control_text(telegram, running) == texts.broadcast_interrupted(
        sent=1, failed=1, remaining=1
    )
    assert telegram.calls("sendMessage") == []
    assert _rows() == [
        (
            "console",
            None,
            operator.username,
            "cancelled",
            f"broadcast {running.id}: stopped from the console while sending: "
            "sent 1, failed 1, not sent 1 of 3",
        )
    ]


def test_a_wipe_stopping_a_running_broadcast_records_its_outcome_for_the_admin_who_wiped(
    webhook, telegram, admin, user, clock, django_capture_on_commit_callbacks
):
    topic = open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)
    control = start_draft(webhook, telegram, admin)
    with django_capture_on_commit_callbacks():
        click(webhook, telegram, admin, control, control.confirm)
    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=topic.thread_id, text="/wipealldata")
    )
    prompt = telegram.topic_messages(topic.thread_id)[-1]

    click_in_group(webhook, telegram, admin, prompt.message_id, keyboard_data(prompt)[0])
    assert run_loop(control.broadcast_id) == "gone"  # the wipe deleted its row

    assert _rows() == [
        (*ALICE, "started", f"broadcast {control.broadcast_id}: 1 recipients"),
        (
            *ALICE,
            "cancelled",
            f"broadcast {control.broadcast_id}: stopped by /wipealldata while sending: "
            "sent 0, failed 0, not sent 1 of 1",
        ),
    ]
    assert received(telegram, user) == []


def test_a_broadcast_left_without_a_heartbeat_is_recorded_interrupted(
    webhook, telegram, admin, people, confirmed, clock
):
    clock.advance(minutes=11)  # its loop never ran: no heartbeat since the confirm

    start_draft(webhook, telegram, admin)  # any /broadcast cleans up first

    assert row(confirmed.broadcast_id) is None  # its end shown, the row deleted
    assert _rows() == [
        (*ALICE, "started", f"broadcast {confirmed.broadcast_id}: 3 recipients"),
        (
            *ALICE,
            "failed",
            f"broadcast {confirmed.broadcast_id}: interrupted (no progress for 10 minutes): "
            "sent 0, failed 0, not sent 3 of 3",
        ),
    ]


def test_a_broadcast_with_a_recent_heartbeat_is_not_ended_by_the_cleanup(
    webhook, telegram, admin, people, confirmed, clock
):
    clock.advance(minutes=9)

    start_draft(webhook, telegram, admin)

    assert row(confirmed.broadcast_id).status == "sending"
    assert [outcome for *_, outcome, _ in _rows()] == ["started"]
