"""Wait-instead-of-fail (issue 25 item 3): with no account able to serve now, a request waits
for one whose cooldown ends within ``SCHEDULER_ELIGIBILITY_WAIT_SECONDS`` instead of failing."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from proxy.models import Account
from tests.proxy.conftest import make_pool_account, post_responses

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"model": "gpt-5.4", "input": [], "stream": False}


def _cooling(token: str, *, seconds: float, kind: str) -> Account:
    until = timezone.now() + timedelta(seconds=seconds)
    if kind == "quota":
        return make_pool_account(
            token, status="quota_exhausted", quota_limit_reached=True, quota_cooldown_until=until
        )
    return make_pool_account(token, cloudflare_cooldown_until=until)


@pytest.mark.parametrize("kind", ["quota", "cloudflare"])
def test_a_request_waits_for_an_account_whose_cooldown_ends_in_two_seconds(
    proxy, upstream, client_key, settings, kind
):
    settings.SCHEDULER_ELIGIBILITY_WAIT_SECONDS = 10
    account = _cooling("tok-a", seconds=2, kind=kind)

    started = time.monotonic()
    response = post_responses(proxy, client_key, BODY)

    assert response.status_code == 200, response.text
    assert time.monotonic() - started >= 1.9
    assert upstream.tokens_called() == ["tok-a"]
    account.refresh_from_db()
    assert account.status == "active"


def test_without_the_setting_it_fails_at_once(proxy, upstream, client_key, settings):
    settings.SCHEDULER_ELIGIBILITY_WAIT_SECONDS = 0
    _cooling("tok-a", seconds=2, kind="cloudflare")

    response = post_responses(proxy, client_key, BODY)

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_available_accounts"
    assert upstream.tokens_called() == []


def test_a_cooldown_beyond_the_wait_fails_without_waiting_for_it(
    proxy, upstream, client_key, settings
):
    settings.SCHEDULER_ELIGIBILITY_WAIT_SECONDS = 3
    _cooling("tok-a", seconds=60, kind="quota")

    started = time.monotonic()
    response = post_responses(proxy, client_key, BODY)

    assert response.status_code == 503
    assert time.monotonic() - started < 3
    assert upstream.tokens_called() == []


def test_accounts_the_clock_cannot_bring_back_are_not_waited_for(
    proxy, upstream, client_key, settings
):
    settings.SCHEDULER_ELIGIBILITY_WAIT_SECONDS = 10
    make_pool_account("tok-a", status="disabled")
    make_pool_account("tok-b", status="quota_exhausted", quota_limit_reached=True)  # no reset

    started = time.monotonic()
    response = post_responses(proxy, client_key, BODY)

    assert response.status_code == 503
    assert time.monotonic() - started < 3
