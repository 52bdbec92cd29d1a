"""Findings 7 and 10 on the bot: the anonymous selfcheck cannot be used to flood Telegram, and a
webhook body nested too deep is acknowledged (200) instead of a 500 Telegram redelivers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bots.models import ProcessedUpdate
from bots.selfcheck_throttle import SELFCHECK_LIVE_CHECKS_PER_SECOND, selfcheck_slot_take
from tests.bots.conftest import ADMIN_SECRET, WEBHOOK_SECRET


@pytest.fixture
def bound(client, bot_settings, telegram, clock):
    """A configured deployment whose webhook points at us, on a clock the test moves."""
    assert client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True).status_code == 200
    telegram.forget_calls()
    return bot_settings


@pytest.mark.django_db
def test_a_burst_of_selfchecks_reaches_telegram_only_a_few_times_a_second(
    client, bound, telegram, clock
):
    answers = [client.get("/telegram/selfcheck", secure=True) for _ in range(6)]

    assert [answer.status_code for answer in answers] == [200, 200, 200, 429, 429, 429]
    assert answers[3].json() == {"error": "too_many_requests", "retry_after": 1}
    assert answers[3]["Retry-After"] == "1"
    assert len(telegram.calls("getWebhookInfo")) == SELFCHECK_LIVE_CHECKS_PER_SECOND == 3

    clock.advance(seconds=1)
    assert client.get("/telegram/selfcheck", secure=True).status_code == 200
    assert len(telegram.calls("getWebhookInfo")) == 4


def test_the_selfcheck_count_is_one_per_second_across_processes():
    """The counter lives in Redis: two workers draw from the same three per second."""
    second = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    taken = [selfcheck_slot_take(now=second) for _ in range(4)]
    later = selfcheck_slot_take(now=second.replace(second=10))

    assert taken == [True, True, True, False]
    assert later is True


_OTHER_WORKER = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
import django
from config.bootstrap import prepare
prepare()
django.setup()
from datetime import UTC, datetime
from bots.selfcheck_throttle import selfcheck_slot_take
print("ready", flush=True)
sys.stdin.readline()
second = datetime(2031, 5, 6, 7, 8, 30, tzinfo=UTC)
print(" ".join(str(selfcheck_slot_take(now=second)) for _ in range(2)), flush=True)
"""


@pytest.mark.subprocess
def test_a_second_worker_process_gets_only_what_the_first_left_of_the_second(settings, tmp_path):
    """Two real processes in the same second: this one takes two of the three live checks, the
    other worker process gets the third and is refused the fourth."""
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT, project_environment

    environment = project_environment(
        settings.DATABASE_URL, tmp_path, REDIS_KEY_PREFIX=settings.REDIS_KEY_PREFIX
    )
    other = subprocess.Popen(
        [sys.executable, "-c", _OTHER_WORKER],
        cwd=PROJECT_ROOT,
        env=environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "ready"
        second = datetime(2031, 5, 6, 7, 8, 30, tzinfo=UTC)
        mine = [selfcheck_slot_take(now=second) for _ in range(2)]
        other.stdin.write("go\n")
        other.stdin.flush()
        theirs = other.stdout.readline().split()
    finally:
        other.stdin.close()
        other.wait(30)

    assert mine == [True, True]
    assert theirs == ["True", "False"]


@pytest.mark.django_db
def test_a_webhook_body_nested_too_deep_is_acknowledged_and_nothing_happens(
    client, bot_settings, bot_row, telegram
):
    response = client.post(
        "/telegram/webhook",
        data=b'{"update_id": 1, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        content_type="application/json",
        headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
    )

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert ProcessedUpdate.objects.count() == 0
    assert telegram.calls() == []
