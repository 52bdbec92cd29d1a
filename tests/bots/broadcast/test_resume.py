"""How a send loop gets back to a worker: the next run after a chunk, and the sweep (beat every
minute, and a worker that starts) for broadcasts whose worker died. The real resumption through
killed workers is test_worker_crash.py."""

from __future__ import annotations

from bots import texts
from bots.pipeline.broadcast import jobs, sending
from bots.services.broadcast_progress import sender_lease_held, sender_lease_take
from bots.tasks import broadcasts_resume_task
from config.schedule import BEAT_SCHEDULE
from tests.bots.broadcast.helpers import (
    UNCONSUMED_QUEUE,
    click,
    make_broadcast,
    received,
    run_loop,
    start_draft,
    take_queued_runs,
)
from tests.fakes.telegram import BOT_ID


def test_the_sweep_queues_a_run_for_each_broadcast_of_the_bot_without_a_live_loop(
    telegram, admin, people, clock, redis_client
):
    orphan = make_broadcast(telegram, initiator=admin, now=clock.now, status="sending")
    unshown = make_broadcast(
        telegram, initiator=admin, now=clock.now, status="completed", source_update_id=2
    )
    live = make_broadcast(
        telegram, initiator=admin, now=clock.now, status="completed", source_update_id=3
    )
    sender_lease_take(broadcast_id=live.id, token=None, ttl_seconds=30)
    stopped = make_broadcast(
        telegram, initiator=admin, now=clock.now, status="failed", source_update_id=4
    )
    make_broadcast(telegram, initiator=admin, now=clock.now, status="pending", source_update_id=5)
    make_broadcast(  # another bot's: not this deployment's
        telegram, initiator=admin, now=clock.now, status="sending", bot_id=BOT_ID + 1
    )

    assert jobs.broadcasts_resume(queue=UNCONSUMED_QUEUE) == [orphan.id, unshown.id, stopped.id]

    runs = take_queued_runs(redis_client)
    assert [(run.bot_id, run.broadcast_id, run.lease_token) for run in runs] == [
        (BOT_ID, orphan.id, None),
        (BOT_ID, unshown.id, None),
        (BOT_ID, stopped.id, None),
    ]


def test_the_sweep_runs_every_minute_from_the_beat_schedule():
    entry = BEAT_SCHEDULE["bots-resume-broadcasts"]

    assert (entry["task"], entry["schedule"]) == (broadcasts_resume_task.name, 60.0)


def test_a_run_that_used_up_its_chunk_hands_on_to_the_next_run_with_its_lease(
    webhook, telegram, admin, people, monkeypatch, redis_client, django_capture_on_commit_callbacks
):
    control = start_draft(webhook, telegram, admin)
    with django_capture_on_commit_callbacks():
        click(webhook, telegram, admin, control, control.confirm)
    monkeypatch.setattr(sending, "TASK_CHUNK_SECONDS", 0.0)

    assert run_loop(control.broadcast_id) == "continues"

    [next_run] = take_queued_runs(redis_client)
    assert next_run.lease_token is not None
    assert sender_lease_held(broadcast_id=control.broadcast_id)  # kept for the next run
    assert all(received(telegram, person) == [] for person in people)
    monkeypatch.setattr(sending, "TASK_CHUNK_SECONDS", 120.0)

    assert run_loop(next_run) == "completed"

    assert [len(received(telegram, person)) for person in people] == [1, 1, 1]
    text = telegram.message(telegram.support_chat_id, control.message.message_id).text
    assert text == texts.broadcast_done(sent=3, failed=0)
    assert not sender_lease_held(broadcast_id=control.broadcast_id)
