"""Every statement the broadcasts run on a business table names the bot (spec §1.6), captured
over a whole journey: creation, cancel, confirm, the send loop, lazy cleanup, the repair path,
the console's stop and the resume sweep."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext

from bots.models import AuditSurface, Broadcast
from bots.pipeline.broadcast import jobs
from bots.pipeline.broadcast.console import stop_broadcast
from bots.pipeline.context import worker_context
from bots.services.audit import AuditActor
from tests.bots.broadcast.helpers import (
    UNCONSUMED_QUEUE,
    click,
    eligible_users,
    make_broadcast,
    run_loop,
    start_draft,
    take_queued_runs,
)
from tests.bots.test_bot_id_filter import _names_the_bot, _touches_business_table


def test_every_broadcast_statement_names_the_bot(
    webhook, telegram, admin, clock, redis_client, django_capture_on_commit_callbacks
):
    bot_id = telegram.bot.id
    people = eligible_users(telegram, bot_id=bot_id, now=clock.now, user_ids=range(6001, 6004))
    telegram.block(people[0].id)
    with CaptureQueriesContext(connection) as captured, django_capture_on_commit_callbacks():
        cancelled = start_draft(webhook, telegram, admin)
        click(webhook, telegram, admin, cancelled, cancelled.cancel)
        sent = start_draft(webhook, telegram, admin)
        click(webhook, telegram, admin, sent, sent.confirm)
        run_loop(sent.broadcast_id)
        start_draft(webhook, telegram, admin)  # left to expire
        clock.advance(minutes=6)
        make_broadcast(
            telegram,
            initiator=admin,
            now=clock.now,
            status="sending",
            updated_at=clock.now - timedelta(minutes=11),
        )
        start_draft(webhook, telegram, admin)  # cleans up the expired draft and the stale send
        done = make_broadcast(
            telegram, initiator=admin, now=clock.now, status="completed", source_update_id=2
        )
        run_loop(done.id)
        stopped = start_draft(webhook, telegram, admin)
        stop_broadcast(
            worker_context(bot_id),
            bot_id=bot_id,
            broadcast_id=stopped.broadcast_id,
            now=clock.now,
            stopped_by=AuditActor(surface=AuditSurface.CONSOLE, actor_name="operator"),
        )
        jobs.broadcasts_resume(queue=UNCONSUMED_QUEUE)
    take_queued_runs(redis_client)

    business = [query["sql"] for query in captured if _touches_business_table(query["sql"])]
    broadcasts = [sql for sql in business if "broadcasts" in sql]
    assert len(broadcasts) > 40
    assert [sql for sql in business if not _names_the_bot(sql)] == []
    # The journey went all the way: every one of its broadcasts ended and was deleted.
    assert Broadcast.objects.count() == 0
