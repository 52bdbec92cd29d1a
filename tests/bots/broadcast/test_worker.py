"""Broadcasts through the session's real Celery worker: two confirms racing for real in
PostgreSQL, /wipealldata and the console stopping a running send before its next recipient. The
worker's bot talks to the session's fake Bot API (its environment is fixed when it starts), so
these tests use that fake."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from bots import texts
from bots.models import Broadcast
from proxy.services.admin_users import admin_user_create_default
from tests.bots.broadcast.helpers import (
    ANNOUNCEMENT_HTML,
    eligible_users,
    received,
    start_draft,
)
from tests.bots.conftest import START, Webhook
from tests.bots.helpers import general_texts
from tests.conftest import run_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]

BROADCASTS = reverse("admin:bots_broadcast_changelist")


@pytest.fixture
def telegram(worker_telegram):
    worker_telegram.reset()
    yield worker_telegram
    worker_telegram.reset()


@pytest.fixture
def people(telegram, clock, webhook):
    return eligible_users(
        telegram, bot_id=telegram.bot.id, now=clock.now, user_ids=range(6001, 6006)
    )


def _wait_until(condition, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the worker did not get there in time"
        time.sleep(0.1)


def _control_text(telegram, control) -> str:
    return telegram.message(telegram.support_chat_id, control.message.message_id).text


def _ended_showing(telegram, control, text: str) -> bool:
    """The control message shows ``text`` and the row is gone (deleted right after the edit)."""
    return _control_text(telegram, control) == text and not Broadcast.objects.exists()


def _click_update(telegram, who, control, data: str) -> dict:
    return telegram.click(
        who, message_id=control.message.message_id, data=data, chat_id=telegram.support_chat_id
    )


def _waiting_on_locks(cursor) -> int:
    # The locker reads the activity view inside its transaction, where PostgreSQL would keep
    # showing it the first snapshot: drop the snapshot first.
    cursor.execute("select pg_stat_clear_snapshot()")
    cursor.execute(
        "select count(*) from pg_stat_activity"
        " where datname = current_database() and wait_event_type = 'Lock'"
    )
    return cursor.fetchone()[0]


def test_two_concurrent_confirms_start_exactly_one_send_loop(
    celery_worker, django_db_blocker, webhook, telegram, admin, people
):
    control = start_draft(webhook, telegram, admin)
    first = _click_update(telegram, admin, control, control.confirm)
    second = _click_update(telegram, admin, control, control.confirm)  # a double click
    responses = {}

    def deliver(name: str, update: dict) -> None:
        try:
            responses[name] = Webhook(Client()).deliver(update)
        finally:
            connections.close_all()

    # Hold the row, so that both confirms reach their UPDATE and wait on it together.
    with psycopg.connect(run_database_url(django_db_blocker), autocommit=False) as locker:
        with locker.cursor() as cursor:
            cursor.execute(
                "select id from broadcasts where id = %s for update", [control.broadcast_id]
            )
            threads = [
                threading.Thread(target=deliver, args=(name, update))
                for name, update in (("first", first), ("second", second))
            ]
            for thread in threads:
                thread.start()
            _wait_until(lambda: _waiting_on_locks(cursor) == 2, timeout=20)
        locker.commit()
    for thread in threads:
        thread.join(30)

    assert [responses[name].status_code for name in ("first", "second")] == [200, 200]
    toasts = sorted(
        telegram.callback_answer(update["callback_query"]["id"]) for update in (first, second)
    )
    assert toasts == sorted([texts.toast_broadcast_confirmed(), texts.toast_broadcast_sending()])
    done = texts.broadcast_done(sent=5, failed=0)
    _wait_until(lambda: _ended_showing(telegram, control, done))
    assert [received(telegram, person) for person in people] == [[ANNOUNCEMENT_HTML]] * 5
    assert len(telegram.calls("sendMessage")) == 2 + 5  # preview, control, one per user


def test_wipealldata_stops_a_running_send_before_its_next_recipient(
    celery_worker, webhook, telegram, admin, people
):
    control = start_draft(webhook, telegram, admin)
    ops = telegram.create_topic_by_hand("ops")
    held = telegram.hold("sendMessage")  # the worker's send to the first recipient

    webhook.deliver_ok(_click_update(telegram, admin, control, control.confirm))
    assert held.wait_until_arrived(20)
    webhook.deliver_ok(telegram.group_message(admin, thread_id=ops, text="/wipealldata"))
    prompt = telegram.topic_messages(ops)[-1]
    confirm_wipe = prompt.reply_markup["inline_keyboard"][0][0]["callback_data"]
    webhook.deliver_ok(
        telegram.click(
            admin, message_id=prompt.message_id, data=confirm_wipe, chat_id=telegram.support_chat_id
        )
    )
    assert general_texts(telegram)[-1] == texts.wipe_done()
    held.release()

    stopped = texts.broadcast_interrupted(sent=1, failed=0, remaining=4)
    _wait_until(lambda: _ended_showing(telegram, control, stopped))
    # The send in flight when the wipe came could not be recalled; nobody after it got one.
    assert [len(received(telegram, person)) for person in people] == [1, 0, 0, 0, 0]


def test_the_console_lists_a_running_send_and_stops_it_before_its_next_recipient(
    celery_worker, webhook, telegram, admin, people
):
    operator = Client()
    operator.force_login(admin_user_create_default(password="a long operator pass 42", now=START))
    control = start_draft(webhook, telegram, admin)
    held = telegram.hold("sendMessage")
    webhook.deliver_ok(_click_update(telegram, admin, control, control.confirm))
    assert held.wait_until_arrived(20)

    listing = operator.get(BROADCASTS)

    [shown] = listing.context["cl"].result_list
    assert (shown.id, shown.status, shown.initiator_user_id, shown.expected_count) == (
        control.broadcast_id,
        "sending",
        admin.id,
        5,
    )
    page = listing.content.decode()
    assert "Started by (Telegram id)" in page
    assert f'<td class="field-started_by">{admin.id}</td>' in page
    assert '<td class="field-remaining_recipients">4</td>' in page  # one claimed, in flight
    assert '<td class="field-in_flight">1</td>' in page
    assert '<td class="field-failed">0</td>' in page  # the claim is not shown as a failure

    stopped_page = operator.post(
        BROADCASTS,
        {"action": "stop_broadcasts", "_selected_action": [str(control.broadcast_id)]},
        follow=True,
    )
    held.release()

    assert [str(message) for message in stopped_page.context["messages"]] == [
        f"Stopping: {control.broadcast_id} — the send stops before its next recipient and its "
        "message in General shows what was sent."
    ]
    stopped = texts.broadcast_interrupted(sent=1, failed=0, remaining=4)
    _wait_until(lambda: _ended_showing(telegram, control, stopped))
    assert [len(received(telegram, person)) for person in people] == [1, 0, 0, 0, 0]
