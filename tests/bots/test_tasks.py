"""The daily trim of processed_updates, run by a real Celery worker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from bots.models import Bot, ProcessedUpdate
from bots.tasks import processed_updates_trim_task
from config.schedule import BEAT_SCHEDULE


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_the_worker_removes_claims_older_than_seven_days(celery_worker):
    now = timezone.now()
    Bot.objects.create(bot_id=4242, created_at=now)
    ProcessedUpdate.objects.create(
        bot_id=4242, update_id=1, status="processed", created_at=now - timedelta(days=8)
    )
    ProcessedUpdate.objects.create(
        bot_id=4242, update_id=2, status="failed", created_at=now - timedelta(days=6)
    )

    deleted = celery_worker.run(processed_updates_trim_task)

    assert deleted == 1
    assert list(ProcessedUpdate.objects.values_list("update_id", flat=True)) == [2]
    assert celery_worker.run(processed_updates_trim_task) == 0  # idempotent


def test_the_trim_runs_daily_from_the_beat_schedule():
    entry = BEAT_SCHEDULE["bots-trim-processed-updates"]

    assert entry["task"] == processed_updates_trim_task.name
    assert entry["schedule"].hour == {3}
    assert entry["schedule"].minute == {23}


def test_the_beats_daily_hours_are_utc_whatever_the_consoles_time_zone(settings):
    """The README's "03:23 UTC": Celery follows Django's TIME_ZONE (the console's,
    Asia/Shanghai by default) unless told otherwise."""
    from config.celery import app

    assert settings.TIME_ZONE != "UTC"
    assert str(app.timezone) == "UTC"
