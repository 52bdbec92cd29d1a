"""The send loop (spec §7.5 step 6), one run at a time in this process — the very function the
Celery task runs (tests/bots/broadcast/test_worker.py runs it in real workers) — against the
fake Bot API, paced by the real limiter in Redis."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from celery import current_app
from django.conf import settings
from django.db import connections

from bots import redis_keys, texts
from bots.clients.telegram import DEFAULT_TIMEOUT, TelegramClient
from bots.models import BotUser, Broadcast, Topic
from bots.outbound.limiter import OutboundLimiter
from bots.pipeline.broadcast import jobs, sending
from bots.services.broadcast_progress import (
    in_flight_mark,
    sender_lease_held,
    sender_lease_take,
    unknown_count,
)
from tests.bots.broadcast.helpers import (
    ANNOUNCEMENT_HTML,
    UNCONSUMED_QUEUE,
    Control,
    click,
    control_text,
    make_broadcast,
    people_broadcast,
    received,
    row,
    run_loop,
    start_draft,
    take_queued_runs,
    take_queued_runs_with_countdowns,
)
from tests.bots.helpers import table_state
from tests.fakes.telegram import BOT_ID


@pytest.fixture
def confirmed(webhook, telegram, admin, people, django_capture_on_commit_callbacks):
    """A broadcast to the three ``people``, confirmed (its first run queued, not run)."""
    control = start_draft(webhook, telegram, admin)
    with django_capture_on_commit_callbacks():
        assert click(webhook, telegram, admin, control, control.confirm) == (
            texts.toast_broadcast_confirmed()
        )
    telegram.forget_calls()
    return control


def _control_text(telegram, control) -> str:
    return telegram.message(telegram.support_chat_id, control.message.message_id).text


def _edits(telegram) -> list[str]:
    return [call.params["text"] for call in telegram.calls("editMessageText") if call.ok]


def test_every_recipient_gets_the_announcement_once_and_the_statistics_follow(
    telegram, people, confirmed, redis_client
):
    assert run_loop(confirmed.broadcast_id) == "completed"

    assert [received(telegram, person) for person in people] == [[ANNOUNCEMENT_HTML]] * 3
    assert [call.params for call in telegram.calls("sendMessage")] == [
        {"chat_id": person.id, "text": ANNOUNCEMENT_HTML, "parse_mode": "HTML"} for person in people
    ]
    assert _edits(telegram) == [
        "📤 正在发送……\n已发送 0，失败 0，剩余 3",
        "✅ 广播完成：成功 3，失败 0\n（成功 = Telegram 已接收，不代表已读；失败的不会重发）",
    ]
    control = telegram.message(telegram.support_chat_id, confirmed.message.message_id)
    assert control.reply_markup is None
    assert row(confirmed.broadcast_id) is None
    # Nothing of the broadcast is left in Redis but the limiter's short-lived keys.
    leftovers = redis_client.keys(f"{settings.REDIS_KEY_PREFIX}bots:broadcast:*")
    assert leftovers == []


def test_blocked_users_count_as_failures_and_keep_their_state(telegram, people, confirmed):
    telegram.block(people[1].id)
    before = table_state()

    assert run_loop(confirmed.broadcast_id) == "completed"

    assert [len(received(telegram, person)) for person in people] == [1, 0, 1]
    assert [call.status for call in telegram.calls("sendMessage")] == [200, 403, 200]
    assert _control_text(telegram, confirmed) == texts.broadcast_done(sent=2, failed=1)
    assert table_state() == before  # the user's rows are not touched


def test_users_no_longer_eligible_at_sending_time_get_nothing_and_count_as_failures(
    telegram, people, confirmed
):
    BotUser.objects.filter(user_id=people[0].id).update(is_banned=True)
    BotUser.objects.filter(user_id=people[2].id).delete()  # /deluser since the confirm
    Topic.objects.filter(user_id=people[2].id).delete()

    assert run_loop(confirmed.broadcast_id) == "completed"

    assert [call.params["chat_id"] for call in telegram.calls("sendMessage")] == [people[1].id]
    assert _control_text(telegram, confirmed) == texts.broadcast_done(sent=1, failed=2)


def test_other_failures_are_never_retried(telegram, people, confirmed):
    telegram.fail_call(2, status=500)  # the first recipient's send (after the progress edit)
    telegram.fail_call(3, mode="disconnect")  # the second's

    assert run_loop(confirmed.broadcast_id) == "completed"

    assert [call.params["chat_id"] for call in telegram.calls("sendMessage")] == [
        person.id for person in people
    ]
    assert _control_text(telegram, confirmed) == texts.broadcast_done(sent=1, failed=2)


def test_a_429_holds_the_loop_for_its_retry_after_and_the_recipient_still_gets_it(
    telegram, people, confirmed
):
    telegram.fail("sendMessage", status=429, retry_after=1)

    assert run_loop(confirmed.broadcast_id) == "completed"

    sends = telegram.calls("sendMessage")
    assert [(call.params["chat_id"], call.status) for call in sends] == [
        (people[0].id, 429),
        (people[0].id, 200),
        (people[1].id, 200),
        (people[2].id, 200),
    ]
    refused_at = sends[0].at
    assert [call for call in telegram.calls() if refused_at < call.at < refused_at + 1] == []
    assert [len(received(telegram, person)) for person in people] == [1, 1, 1]
    assert _control_text(telegram, confirmed) == texts.broadcast_done(sent=3, failed=0)


@pytest.mark.slow
def test_a_recipient_refused_with_429_six_times_counts_as_a_failure(telegram, people, confirmed):
    telegram.fail("sendMessage", status=429, retry_after=1, times=6)

    assert run_loop(confirmed.broadcast_id) == "completed"

    chats = [call.params["chat_id"] for call in telegram.calls("sendMessage")]
    assert chats == [people[0].id] * 6 + [people[1].id, people[2].id]
    assert _control_text(telegram, confirmed) == texts.broadcast_done(sent=2, failed=1)


@pytest.mark.parametrize(
    "recipients",
    [
        "[6003,6002,6001]",
        "[6001,6001,6002]",
        "not json",
        "[6001,true,6003]",
        "[6001,6002]",
        "[0,6001,6002]",
        '{"a":1}',
    ],
)
def test_an_unreadable_recipient_list_sends_nothing_and_counts_everybody_as_failed(
    recipients, telegram, admin, people, clock
):
    broken = make_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        recipient_ids_json=recipients,
        expected_count=3,
    )

    assert run_loop(broken.id) == "completed"

    assert telegram.calls("sendMessage") == []
    text = control_text(telegram, broken)
    assert text == texts.broadcast_done(sent=0, failed=3)


def test_a_run_after_a_crash_resumes_after_the_last_claim_and_names_the_unknown_send(
    telegram, admin, people, clock
):
    # A loop sent to the first recipient, claimed the second, and died during that send.
    crashed = people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        success_count=1,
        failure_count=1,
    )
    in_flight_mark(broadcast_id=crashed.id, index=1, successes=1)

    assert run_loop(crashed.id) == "completed"

    assert [call.params["chat_id"] for call in telegram.calls("sendMessage")] == [people[2].id]
    text = control_text(telegram, crashed)
    assert text == (
        "✅ 广播完成：成功 2，失败 0\n（成功 = Telegram 已接收，不代表已读；失败的不会重发）\n"
        "另有 1 位在发送时发送进程中断，是否送达未知，不会重发。"
    )


def test_a_marker_of_a_send_whose_success_was_recorded_is_not_unknown(
    telegram, admin, people, clock
):
    # The loop died after recording the second send's success, before clearing its marker.
    crashed = people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="sending",
        success_count=2,
        failure_count=0,
    )
    in_flight_mark(broadcast_id=crashed.id, index=1, successes=1)

    assert run_loop(crashed.id) == "completed"

    text = control_text(telegram, crashed)
    assert text == texts.broadcast_done(sent=3, failed=0)
    assert unknown_count(broadcast_id=crashed.id) == 0


def test_a_run_finding_another_loop_on_its_broadcast_does_nothing(telegram, people, confirmed):
    sender_lease_take(broadcast_id=confirmed.broadcast_id, token=None, ttl_seconds=30)

    assert run_loop(confirmed.broadcast_id) == "busy"

    assert telegram.calls() == []
    assert row(confirmed.broadcast_id).status == "sending"


def test_a_run_on_a_stopped_broadcast_shows_what_was_sent_and_deletes_it(
    telegram, admin, people, clock
):
    stopped = people_broadcast(
        telegram,
        initiator=admin,
        now=clock.now,
        status="failed",
        success_count=2,
    )

    assert run_loop(stopped.id) == "stopped"

    text = control_text(telegram, stopped)
    assert text == texts.broadcast_interrupted(sent=2, failed=0, remaining=1)
    assert Broadcast.objects.count() == 0
    assert telegram.calls("sendMessage") == []


def test_a_final_edit_that_fails_for_now_is_retried_by_the_next_run(
    telegram, people, confirmed, redis_client
):
    telegram.fail_call(5, status=502)  # progress edit, three sends, then the final edit

    assert run_loop(confirmed.broadcast_id) == "continues"

    assert row(confirmed.broadcast_id).status == "completed"
    # The next run, queued on the queue this one came from, with the lease it keeps.
    [next_run] = take_queued_runs(redis_client)
    assert (next_run.broadcast_id, next_run.retries) == (confirmed.broadcast_id, 1)

    assert run_loop(next_run) == "completed"

    assert _control_text(telegram, confirmed) == texts.broadcast_done(sent=3, failed=0)
    assert len(telegram.calls("sendMessage")) == 3  # nobody got it twice
    assert row(confirmed.broadcast_id) is None


@pytest.mark.django_db(transaction=True)  # the loop runs in a thread of its own
def test_a_send_running_for_longer_than_the_stale_limit_is_not_declared_stale(
    webhook, telegram, admin, people, clock
):
    live = people_broadcast(telegram, initiator=admin, now=clock.now, status="sending")
    control = Control(
        message=telegram.message(telegram.support_chat_id, live.control_msg_id),
        confirm=f"b:y:{live.id}",
        cancel=f"b:n:{live.id}",
    )
    first_send = telegram.hold("sendMessage")
    outcome = {}

    def loop() -> None:
        try:
            outcome["run"] = run_loop(live.id)
        finally:
            connections.close_all()  # the thread's own database connection

    sender = threading.Thread(target=loop)
    sender.start()
    try:
        assert first_send.wait_until_arrived(10), "the first send never arrived"
        # The loop has been sending for 11 minutes (the stale limit is 10) when it moves on
        # to its second recipient; the admin clicks while that send is in flight.
        clock.advance(minutes=11)
        second_send = telegram.hold("sendMessage")
        first_send.release()
        assert second_send.wait_until_arrived(10), "the second send never arrived"
        try:
            toast = click(webhook, telegram, admin, control, control.confirm)

            assert toast == texts.toast_broadcast_sending() == "正在发送，请稍候。"
            assert row(live.id).status == "sending"
        finally:
            second_send.release()
    finally:
        first_send.release()
        sender.join(30)

    assert outcome["run"] == "completed"
    assert [received(telegram, person) for person in people] == [["<b>📣 earlier</b>"]] * 3
    assert control_text(telegram, live) == texts.broadcast_done(sent=3, failed=0)
    assert row(live.id) is None


# ------------------------------------------------------------------ long waits, the lease


@pytest.fixture
def unblock_the_bot(redis_client):
    """The test holds the bot back for minutes: the block goes with the test."""
    yield
    redis_client.delete(redis_keys.outbound_blocked(BOT_ID))


def _updated_at(broadcast_id: int):
    return Broadcast.objects.get(id=broadcast_id).updated_at


@pytest.mark.parametrize(("blocked_for", "next_run_after"), [(300, 60), (150, 60)])
def test_a_retry_after_longer_than_the_run_queues_the_next_run_after_it_with_the_heartbeat(
    blocked_for,
    next_run_after,
    telegram,
    people,
    confirmed,
    clock,
    redis_client,
    unblock_the_bot,
):
    # Telegram asked the bot to wait longer than a run's 120 s.
    OutboundLimiter(bot_id=BOT_ID).block(seconds=blocked_for)
    clock.advance(seconds=30)
    started = time.monotonic()

    assert run_loop(confirmed.broadcast_id) == "continues"

    # The run neither slept out its chunk nor ended for a new run to start at once (which
    # would find the same wait: a busy loop); the heartbeat is fresh for the wait.
    assert time.monotonic() - started < 10
    [(next_run, countdown)] = take_queued_runs_with_countdowns(redis_client)
    assert next_run_after - 2 <= countdown <= next_run_after
    assert next_run.lease_token is not None
    assert sender_lease_held(broadcast_id=confirmed.broadcast_id)
    assert _updated_at(confirmed.broadcast_id) == clock.now
    assert telegram.calls("sendMessage") == []
    assert all(received(telegram, person) == [] for person in people)


def test_a_retry_after_shorter_than_the_step_is_waited_out_to_the_second(
    telegram, people, confirmed, redis_client, unblock_the_bot, monkeypatch
):
    monkeypatch.setattr(sending, "TASK_CHUNK_SECONDS", 5.0)
    OutboundLimiter(bot_id=BOT_ID).block(seconds=40)

    assert run_loop(confirmed.broadcast_id) == "continues"

    [(_, countdown)] = take_queued_runs_with_countdowns(redis_client)
    assert 37 <= countdown <= 40
    assert telegram.calls("sendMessage") == []


def test_a_final_edit_held_back_by_a_long_retry_after_runs_again_after_it(
    telegram, admin, people, clock, redis_client, unblock_the_bot
):
    done = people_broadcast(
        telegram, initiator=admin, now=clock.now, status="completed", success_count=3
    )
    OutboundLimiter(bot_id=BOT_ID).block(seconds=200)

    assert run_loop(done.id) == "continues"

    [(next_run, countdown)] = take_queued_runs_with_countdowns(redis_client)
    assert 197 <= countdown <= 200  # not RUN_RETRY_SECONDS: five of those would give up
    assert next_run.retries == 1
    assert row(done.id) is not None  # kept for the run that shows it
    assert telegram.calls("editMessageText") == []


def test_the_sender_lease_outlives_every_bot_api_call_of_the_loop(
    telegram, people, confirmed, redis_client, monkeypatch
):
    # The longest a Bot API call may take: the client's connect + read timeouts.
    longest_call_ms = sum(DEFAULT_TIMEOUT) * 1000
    lease_left_at_calls = []
    real_call = TelegramClient.call

    def call(client, method, parameters=None):
        lease = redis_keys.broadcast_sender(confirmed.broadcast_id)
        lease_left_at_calls.append((method, redis_client.pttl(lease)))
        return real_call(client, method, parameters)

    monkeypatch.setattr(TelegramClient, "call", call)

    assert run_loop(confirmed.broadcast_id) == "completed"

    assert [method for method, _ in lease_left_at_calls] == [
        "editMessageText",
        "sendMessage",
        "sendMessage",
        "sendMessage",
        "editMessageText",
    ]
    assert all(left > longest_call_ms for _, left in lease_left_at_calls), lease_left_at_calls


def test_the_winning_confirm_takes_the_sender_lease_before_its_run_is_queued(
    webhook, telegram, admin, people, monkeypatch, django_capture_on_commit_callbacks
):
    control = start_draft(webhook, telegram, admin)
    queued = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, kwargs, **options: queued.append(kwargs)
    )
    with django_capture_on_commit_callbacks(execute=True):
        click(webhook, telegram, admin, control, control.confirm)

    [first_run] = queued
    # The resume sweep sees a live loop from now on: it queues no second one.
    assert sender_lease_held(broadcast_id=control.broadcast_id)
    assert jobs.broadcasts_resume(queue=UNCONSUMED_QUEUE) == []
    assert (
        sender_lease_take(
            broadcast_id=control.broadcast_id, token=first_run["lease_token"], ttl_seconds=30
        )
        == first_run["lease_token"]
    )


def test_a_confirm_redelivered_while_its_loop_runs_queues_no_second_run(
    webhook, telegram, admin, people, monkeypatch, django_capture_on_commit_callbacks
):
    control = start_draft(webhook, telegram, admin)
    sender_lease_take(broadcast_id=control.broadcast_id, token=None, ttl_seconds=30)  # a loop
    queued = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, kwargs, **options: queued.append(kwargs)
    )
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        click(webhook, telegram, admin, control, control.confirm)

    assert (len(callbacks), queued) == (1, [])


def test_the_logs_say_what_became_of_each_send(telegram, people, confirmed, caplog):
    telegram.fail_call(2, status=500)  # the first recipient's send: delivered or not, unknown
    telegram.block(people[1].id)

    with caplog.at_level(logging.INFO, logger="bots.pipeline.broadcast.sending"):
        assert run_loop(confirmed.broadcast_id) == "completed"

    lines = [record.getMessage() for record in caplog.records]
    broadcast = confirmed.broadcast_id
    assert lines == [
        f"broadcast {broadcast}: send to {people[0].id} failed (sendMessage HTTP 500: Internal "
        "Server Error): outcome unknown, counted as a failure, not resent",
        f"broadcast {broadcast}: Telegram refused the send to {people[1].id} (sendMessage HTTP "
        "403: Forbidden: bot was blocked by the user): counted as a failure",
        f"broadcast {broadcast}: every recipient handled: 1 accepted by Telegram, 2 failed",
    ]
    assert telegram.token not in caplog.text
