"""The audit trail of purges and wipes that end outside the admin's click (issue #24): a wipe's
row carries its counts; one continued in Celery is recorded "started" and the worker adds the
outcome's row — done, failed (a topic or message not deleted, interrupted, its lock taken by
another job, no bot configuration in the worker) — in the name of the admin who confirmed it,
and only once even when its last chunk runs twice."""

from __future__ import annotations

import hashlib
import json

import pytest
from django_redis import get_redis_connection

from bots import redis_keys
from bots.models import AdminAuditEntry, BotUser, Topic
from bots.pipeline import bulk
from bots.services.bulk_lock import bulk_lock_acquire
from bots.task_names import PURGE_CONTINUE_TASK, WIPE_CONTINUE_TASK
from bots.tasks import purge_continue_task, wipe_continue_task
from tests.bots.conftest import ADMIN_ID
from tests.bots.helpers import click_in_group, keyboard_data, open_conversation

TASKS = {PURGE_CONTINUE_TASK: purge_continue_task, WIPE_CONTINUE_TASK: wipe_continue_task}
IN_CELERY = "continues in the worker"
NOT_DELETABLE = "Bad Request: not enough rights to manage topics"


def _rows() -> list[tuple]:
    """The trail as (action, user, outcome, detail), each row checked to name Alice."""
    rows = AdminAuditEntry.objects.order_by("id")
    assert {row[:3] for row in rows.values_list("surface", "actor_id", "actor_name")} <= {
        ("telegram", ADMIN_ID, "@alice_support")
    }
    return list(rows.values_list("action", "target_user_id", "outcome", "detail"))


class Worker:
    """Stands in for Celery's broker and worker: the continuations the code queued, run in
    order as the worker would (each may queue the next)."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, dict]] = []
        self.ran: list[tuple[str, dict]] = []

    def send_task(self, name: str, *, kwargs: dict, countdown: float | None = None) -> None:
        self.queued.append((name, json.loads(json.dumps(kwargs))))  # as the broker carries it

    def run_all(self) -> None:
        while self.queued:
            name, kwargs = self.queued.pop(0)
            self.ran.append((name, kwargs))
            TASKS[name](**kwargs)


@pytest.fixture
def worker(monkeypatch) -> Worker:
    """Nothing is done inline: every message or topic is left to the Celery continuation."""
    monkeypatch.setattr(bulk, "INLINE_BUDGET_SECONDS", 0.0)
    tasks = Worker()
    monkeypatch.setattr(bulk, "current_app", tasks)
    return tasks


@pytest.fixture
def topic(webhook, telegram, user, clock) -> Topic:
    return open_conversation(webhook, telegram, user, bot_id=telegram.bot.id, now=clock.now)


def _purge(webhook, telegram, admin, topic) -> None:
    webhook.deliver_ok(telegram.group_message(admin, thread_id=topic.thread_id, text="/purgemsg"))


def _wipe(webhook, telegram, admin, topic) -> None:
    webhook.deliver_ok(
        telegram.group_message(admin, thread_id=topic.thread_id, text="/wipealldata")
    )
    prompt = telegram.topic_messages(topic.thread_id)[-1]
    click_in_group(webhook, telegram, admin, prompt.message_id, keyboard_data(prompt)[0])


# ------------------------------------------------------------------ wipes


def test_a_wipe_within_the_click_records_its_counts_and_failed_when_a_topic_stays(
    webhook, telegram, admin, user, topic
):
    telegram.fail("deleteForumTopic", status=400, description=NOT_DELETABLE)

    _wipe(webhook, telegram, admin, topic)

    assert _rows()[-1] == (
        "wipe",
        None,
        "failed",
        "topics deleted 0, already gone 0, failed 1; no row deleted",
    )
    assert BotUser.objects.filter(user_id=user.id).exists()  # nothing was deleted


def test_a_wipe_continued_in_celery_records_its_outcome_for_the_admin_who_confirmed(
    webhook, telegram, admin, topic, worker
):
    _wipe(webhook, telegram, admin, topic)
    assert _rows()[1:] == [("wipe", None, "started", IN_CELERY)]

    worker.run_all()

    assert _rows()[1:] == [
        ("wipe", None, "started", IN_CELERY),
        (
            "wipe",
            None,
            "done",
            "finished in the worker: topics deleted 1, already gone 0, failed 0",
        ),
    ]
    assert Topic.objects.count() == 0


def test_a_wipe_continued_in_celery_that_could_not_delete_a_topic_is_recorded_failed(
    webhook, telegram, admin, topic, worker
):
    _wipe(webhook, telegram, admin, topic)
    telegram.fail("deleteForumTopic", status=400, description=NOT_DELETABLE)

    worker.run_all()

    assert _rows()[2:] == [
        (
            "wipe",
            None,
            "failed",
            "finished in the worker: topics deleted 0, already gone 0, failed 1; no row deleted",
        )
    ]


def test_a_wipe_interrupted_in_celery_is_recorded_failed(webhook, telegram, admin, topic, worker):
    _wipe(webhook, telegram, admin, topic)
    # Telegram does not answer, chunk after chunk, until the continuation gives up.
    telegram.fail("deleteForumTopic", status=502, times=bulk.MAX_TASK_RETRIES + 1)

    worker.run_all()

    assert _rows()[2:] == [
        (
            "wipe",
            None,
            "failed",
            "interrupted in the worker: topics deleted 0, already gone 0, failed 0; no row deleted",
        )
    ]
    assert Topic.objects.count() == 1


# ------------------------------------------------------------------ purges and wipes alike

JOBS = {
    "purge": (_purge, "deleted 0, already gone 0, failed 0 of 2"),
    "wipe": (_wipe, "topics deleted 0, already gone 0, failed 0; no row deleted"),
}


def _target(job: str, user) -> int | None:
    return user.id if job == "purge" else None


@pytest.mark.parametrize("job", JOBS)
def test_a_job_whose_lock_another_job_took_is_recorded_failed(
    job, webhook, telegram, admin, user, topic, worker
):
    start, untouched = JOBS[job]
    start(webhook, telegram, admin, topic)
    # Its continuation waited in the queue past its lock's lease, and another job took it.
    get_redis_connection("default").delete(redis_keys.bulk_deletion_lock(telegram.bot.id))
    other = bulk_lock_acquire(bot_id=telegram.bot.id, ttl_seconds=60)
    assert other is not None
    telegram.forget_calls()

    worker.run_all()

    assert telegram.calls("deleteMessage") + telegram.calls("deleteForumTopic") == []
    assert _rows()[-2:] == [
        (job, _target(job, user), "started", IN_CELERY),
        (
            job,
            _target(job, user),
            "failed",
            f"stopped in the worker (another purge or wipe holds the lock): {untouched}",
        ),
    ]


@pytest.mark.parametrize("job", JOBS)
def test_a_job_whose_worker_has_no_bot_configuration_is_recorded_failed(
    job, webhook, telegram, admin, user, topic, worker, bot_settings
):
    start, untouched = JOBS[job]
    start(webhook, telegram, admin, topic)
    bot_settings.TELEGRAM_BOT_TOKEN = ""  # the worker's environment lacks it

    worker.run_all()

    assert _rows()[-1] == (
        job,
        _target(job, user),
        "failed",
        f"stopped in the worker (the worker has no bot configuration): {untouched}",
    )


@pytest.mark.parametrize("job", JOBS)
def test_a_last_chunk_run_twice_records_the_outcome_once(
    job, webhook, telegram, admin, user, topic, worker
):
    start, _ = JOBS[job]
    start(webhook, telegram, admin, topic)
    worker.run_all()
    assert [outcome for _, _, outcome, _ in _rows()[-2:]] == ["started", "done"]
    # Its worker died after the outcome's row, before marking the job finished: Celery
    # delivers the last chunk again, which finds nothing left and finishes once more.
    name, last_chunk = worker.ran[-1]
    token_digest = hashlib.sha256(last_chunk["job"]["lock_token"].encode()).hexdigest()
    get_redis_connection("default").delete(
        redis_keys.bulk_job_finished(telegram.bot.id, token_digest)
    )

    TASKS[name](**last_chunk)

    assert [outcome for _, _, outcome, _ in _rows()[-2:]] == ["started", "done"]
