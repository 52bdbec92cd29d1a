"""The scheduled quota read of active accounts (issue 38 item 2): beat runs it every
PROXY_QUOTA_READ_INTERVAL_SECONDS; each run reads the active accounts whose quota was not read
within the interval (least recently read first, 3 s apart) through the same usage call the
recovery pass makes, and leaves alone the accounts the recovery pass or token refresh own."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.models import Account
from proxy.services.quota_reads import quota_read_active
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.tasks import read_active_quotas_task
from tests.proxy.conftest import make_pool_account

pytestmark = pytest.mark.django_db(transaction=True)
INTERVAL = timedelta(minutes=15)


@pytest.fixture(autouse=True)
def runtime_row():
    runtime_settings_ensure(now=timezone.now())


def usage(used_percent: float, *, reset_at: float) -> dict:
    return {
        "plan_type": "plus",
        "rate_limit": {
            "allowed": True,
            "limit_reached": False,
            "primary_window": {
                "used_percent": used_percent,
                "limit_window_seconds": 18000,
                "reset_at": int(reset_at),
            },
        },
    }


class Pauses(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _asked(upstream) -> list[str]:
    return [call.header("authorization") for call in upstream.server.requests_to("/codex/usage")]


def test_active_accounts_not_read_within_the_interval_are_read_oldest_first(upstream):
    now = timezone.now()
    stale = make_pool_account("tok-stale", quota_fetched_at=now - timedelta(hours=2))
    never = make_pool_account("tok-never")
    make_pool_account("tok-fresh", quota_fetched_at=now - timedelta(minutes=5))
    make_pool_account("tok-disabled", status="disabled")
    make_pool_account("tok-limited", status="quota_exhausted", quota_limit_reached=True)
    make_pool_account("tok-limited-active", quota_limit_reached=True)
    make_pool_account("tok-expired", access_token_expires_at=now - timedelta(minutes=1))
    for token in ("tok-stale", "tok-never"):
        upstream.usage[token] = usage(30, reset_at=now.timestamp() + 3600)
    pauses = Pauses()

    report = quota_read_active(now=now, interval=INTERVAL, sleep=pauses)

    assert report.read == [never.pk, stale.pk]
    assert (report.limit_reached, report.failed) == ([], [])
    assert _asked(upstream) == ["Bearer tok-never", "Bearer tok-stale"]
    assert pauses == [3.0]
    for account in (never, stale):
        stored = Account.objects.get(pk=account.pk)
        assert stored.quota_fetched_at == now
        assert stored.quota_json["snapshots"][0]["primary"]["used_percent"] == 30
    # The same run again finds nothing due.
    upstream.server.clear()
    assert quota_read_active(now=now + timedelta(minutes=1), interval=INTERVAL).read == []
    assert _asked(upstream) == []


def test_a_read_that_finds_the_limit_reached_holds_the_account_back(upstream):
    now = timezone.now()
    account = make_pool_account("tok-full")
    upstream.usage["tok-full"] = usage(100, reset_at=now.timestamp() + 1800)
    upstream.usage["tok-full"]["rate_limit"].update(allowed=False, limit_reached=True)

    report = quota_read_active(now=now, interval=INTERVAL)

    assert report.limit_reached == [account.pk]
    stored = Account.objects.get(pk=account.pk)
    assert (stored.status, stored.quota_limit_reached) == ("quota_exhausted", True)


def test_an_account_whose_usage_cannot_be_read_is_left_as_it_was(upstream):
    account = make_pool_account("tok-broken")
    upstream.usage["tok-broken"] = 401

    report = quota_read_active(now=timezone.now(), interval=INTERVAL)

    assert (report.read, report.failed) == ([], [account.pk])
    stored = Account.objects.get(pk=account.pk)
    assert (stored.status, stored.quota_json, stored.quota_fetched_at) == ("active", None, None)


def test_the_task_reads_with_the_interval_setting(upstream, settings):
    settings.PROXY_QUOTA_READ_INTERVAL_SECONDS = 600
    now = timezone.now()
    make_pool_account("tok-recent", quota_fetched_at=now - timedelta(minutes=8))
    # Read by the previous run, ten minutes ago less its queueing: due all the same (a tenth
    # of the interval is slack), else it would be read every other run.
    due = make_pool_account("tok-due", quota_fetched_at=now - timedelta(minutes=9, seconds=40))
    upstream.usage["tok-due"] = usage(5, reset_at=now.timestamp() + 3600)

    result = read_active_quotas_task()

    assert result == {"read": 1, "limit_reached": 0, "failed": 0}
    assert _asked(upstream) == ["Bearer tok-due"]
    assert Account.objects.get(pk=due.pk).quota_fetched_at > now


def test_beat_schedules_the_read_at_the_setting_and_not_at_all_at_0(settings):
    from config import schedule

    original = settings.PROXY_QUOTA_READ_INTERVAL_SECONDS
    try:
        settings.PROXY_QUOTA_READ_INTERVAL_SECONDS = 120
        entry = importlib.reload(schedule).BEAT_SCHEDULE["proxy-read-active-quotas"]
        assert entry == {"task": "proxy.read_active_quotas", "schedule": 120.0}
        settings.PROXY_QUOTA_READ_INTERVAL_SECONDS = 0
        assert "proxy-read-active-quotas" not in importlib.reload(schedule).BEAT_SCHEDULE
    finally:
        settings.PROXY_QUOTA_READ_INTERVAL_SECONDS = original
        importlib.reload(schedule)
