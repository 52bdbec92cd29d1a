"""Quota recovery (spec §4.3–§4.4, §3.2): the usage re-check that puts quota-limited accounts
back into service, its grace / spacing / 30-minute rules, and the window roll that lifts a
limit on the request path."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.models import Account, AccountUsage
from proxy.services.quota_refresh import quota_refresh
from proxy.services.runtime_settings import runtime_settings_ensure
from tests.proxy.conftest import make_pool_account, post_responses

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def runtime_row():
    runtime_settings_ensure(now=timezone.now())


def usage(used_percent: float, *, reset_at: float, limit_reached: bool | None = None) -> dict:
    reached = used_percent >= 100 if limit_reached is None else limit_reached
    return {
        "plan_type": "plus",
        "rate_limit": {
            "allowed": not reached,
            "limit_reached": reached,
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


def _row(account) -> Account:
    return Account.objects.get(pk=account.pk)


def test_a_402_account_returns_to_service_once_its_usage_says_so(upstream):
    now = timezone.now()
    account = make_pool_account("tok-402", status="quota_exhausted")  # a 402: no reset known
    upstream.usage["tok-402"] = usage(12, reset_at=now.timestamp() + 3600)

    report = quota_refresh(now=now)

    assert (report.checked, report.recovered) == ([account.pk], [account.pk])
    row = _row(account)
    assert (row.status, row.quota_limit_reached, row.quota_fetched_at) == ("active", False, now)
    [call] = upstream.server.requests_to("/codex/usage")
    assert call.header("authorization") == "Bearer tok-402"


def test_a_limit_is_rechecked_only_after_its_reset_and_the_grace(upstream):
    start = timezone.now()
    reset = start + timedelta(hours=1)
    account = make_pool_account("tok-limited", status="quota_exhausted")
    upstream.usage["tok-limited"] = usage(100, reset_at=reset.timestamp())

    first = quota_refresh(now=start)
    assert first.still_limited == [account.pk]
    row = _row(account)
    assert (row.status, row.quota_limit_reached, row.quota_cooldown_until) == (
        "quota_exhausted",
        True,
        reset.replace(microsecond=0),
    )

    upstream.server.clear()
    upstream.usage["tok-limited"] = usage(0, reset_at=reset.timestamp() + 18000)
    # Before the reset, and within the 30 s of grace after it: not asked.
    assert quota_refresh(now=start + timedelta(minutes=40)).checked == []
    assert quota_refresh(now=reset + timedelta(seconds=20)).checked == []
    assert upstream.server.requests_to("/codex/usage") == []

    after = quota_refresh(now=reset + timedelta(seconds=31))

    assert after.recovered == [account.pk]
    row = _row(account)
    assert (row.status, row.quota_limit_reached, row.quota_cooldown_until) == (
        "active",
        False,
        None,
    )


def test_a_limit_without_a_known_reset_is_rechecked_every_30_minutes(upstream):
    start = timezone.now()
    account = make_pool_account("tok-unknown", status="quota_exhausted")
    upstream.usage["tok-unknown"] = usage(0, reset_at=0, limit_reached=True)
    upstream.usage["tok-unknown"]["rate_limit"]["primary_window"].pop("reset_at")

    assert quota_refresh(now=start).still_limited == [account.pk]
    assert _row(account).quota_cooldown_until is None  # nothing says when it ends
    assert quota_refresh(now=start + timedelta(minutes=29)).checked == []

    upstream.usage["tok-unknown"] = usage(5, reset_at=start.timestamp() + 18000)
    later = quota_refresh(now=start + timedelta(minutes=31))

    assert later.recovered == [account.pk]
    assert _row(account).status == "active"


def test_checks_are_three_seconds_apart_and_only_candidates_are_asked(upstream):
    from proxy.services import quota_refresh as module

    now = timezone.now()
    first = make_pool_account("tok-one", status="quota_exhausted")
    second = make_pool_account("tok-two", quota_verify_required=True)
    make_pool_account("tok-fine")  # active, nothing to verify: never asked
    make_pool_account("tok-disabled", status="disabled", quota_limit_reached=True)
    for token in ("tok-one", "tok-two"):
        upstream.usage[token] = usage(10, reset_at=now.timestamp() + 3600)
    pauses = Pauses()

    report = module.quota_refresh(now=now, sleep=pauses)

    assert report.checked == [first.pk, second.pk]
    assert pauses == [3.0]
    asked = [call.header("authorization") for call in upstream.server.requests_to("/codex/usage")]
    assert asked == ["Bearer tok-one", "Bearer tok-two"]
    assert _row(second).quota_verify_required is False


def test_an_unreadable_usage_endpoint_changes_nothing(upstream):
    now = timezone.now()
    account = make_pool_account("tok-broken", status="quota_exhausted")
    upstream.usage["tok-broken"] = 500

    report = quota_refresh(now=now)

    assert report.failed == [account.pk]
    row = _row(account)
    assert (row.status, row.quota_fetched_at) == ("quota_exhausted", None)


def test_a_rolled_usage_window_lifts_the_limit_on_the_request_path(proxy, upstream, client_key):
    now = timezone.now()
    account = make_pool_account(
        "tok-rolled",
        status="quota_exhausted",
        quota_limit_reached=True,
        quota_cooldown_until=now + timedelta(days=3),  # a weekly reset still ahead
    )
    AccountUsage.objects.create(
        account=account,
        window_reset_at=now - timedelta(minutes=1),  # the 5-hour window just rolled
        limit_window_seconds=18000,
        window_request_count=40,
    )
    upstream.usage["tok-rolled"] = usage(3, reset_at=now.timestamp() + 18000)

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 200
    assert upstream.tokens_called() == ["tok-rolled"]
    # verified first (the limit was lifted with quota_verify_required), then served
    assert len(upstream.server.requests_to("/codex/usage")) == 1
    row = _row(account)
    assert (row.status, row.quota_limit_reached, row.quota_verify_required) == (
        "active",
        False,
        False,
    )
