"""A 401 on ``/v1`` (peers B.2: a 401 is not a dead account): one refresh of that account and
one retry on it before it is demoted, before any byte reached the client."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.conf import settings

from proxy.models import Account
from proxy.tasks import refresh_account_token_task
from telemetry.models import UsageRecord
from tests.fakes.codex import Reply
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account, post_responses

ALICE = Identity("org-alice", "user-alice", "plus", "alice@example.com")
TOKEN_EXPIRED = {
    "error": {
        "message": "Provided authentication token is expired. Please try signing in again.",
        "type": None,
        "code": "token_expired",
    }
}


def _expired_for(upstream, token: str) -> None:
    upstream.program(token, Reply(kind="status", status=401, body=TOKEN_EXPIRED))


def _row(account) -> Account:
    return Account.objects.get(pk=account.pk)


@pytest.mark.parametrize("stream", [False, True])
def test_a_401_is_answered_after_one_refresh(proxy, upstream, oauth, client_key, stream):
    account = make_oauth_account(oauth, ALICE, expires_in=3600)
    old_token, spent = account.access_token, account.refresh_token
    _expired_for(upstream, old_token)  # revoked upstream before its time

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": stream})

    assert response.status_code == 200
    assert "Hello from the fake upstream." in response.text
    row = _row(account)
    assert upstream.tokens_called() == [old_token, row.access_token]
    assert [call["refresh_token"] for call in oauth.token_calls()] == [spent]
    assert row.access_token == oauth.issued_access_tokens[-1]
    assert row.refresh_token == oauth.issued_refresh_tokens[-1]
    assert row.status == "active"
    proxy.drain()
    record = UsageRecord.objects.get()
    assert (record.account_id, record.attempt_index) == (account.pk, 1)


def test_a_401_whose_refresh_fails_demotes_the_account_and_hands_it_to_the_refresher(
    proxy, upstream, oauth, client_key
):
    account = make_oauth_account(oauth, ALICE)
    other = make_oauth_account(oauth, Identity("org-bob", "user-bob"))
    Account.objects.filter(pk=other.pk).update(added_at=account.added_at.replace(year=2100))
    _expired_for(upstream, account.access_token)
    oauth.fail(account.refresh_token, "unknown")

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 200  # the next account served
    assert upstream.tokens_called() == [account.access_token, other.access_token]
    assert len(oauth.token_calls()) == 1  # one refresh, no retry of it
    row = _row(account)
    assert row.status == "expired"
    assert row.access_token == account.access_token
    assert row.next_refresh_at is not None  # due for the refresher's own (confirming) run


def test_a_fresh_token_rejected_too_demotes_the_account_without_a_new_refresh(
    proxy, upstream, oauth, client_key
):
    account = make_oauth_account(oauth, ALICE)
    old_token = account.access_token
    _expired_for(upstream, old_token)
    # the token the refresh hands out is not known beforehand: every other token gets a 401
    upstream.default_reply = Reply(kind="status", status=401, body=TOKEN_EXPIRED)

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 401
    row = _row(account)
    assert upstream.tokens_called() == [old_token, row.access_token]
    assert row.access_token != old_token  # the refresh was stored
    assert (row.status, row.next_refresh_at) == ("expired", None)
    assert len(oauth.token_calls()) == 1


def test_a_401_without_a_refresh_token_is_demoted_at_once(proxy, upstream, oauth, client_key):
    account = make_oauth_account(oauth, ALICE)
    Account.objects.filter(pk=account.pk).update(refresh_token=None)
    _expired_for(upstream, account.access_token)

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 401
    assert oauth.token_calls() == []
    row = _row(account)
    assert (row.status, row.next_refresh_at) == ("expired", None)


@pytest.mark.subprocess
def test_a_running_scheduled_refresh_is_waited_for_not_repeated(
    proxy, upstream, oauth, client_key, celery_worker, redis_client
):
    account = make_oauth_account(oauth, ALICE)
    old_token = account.access_token
    _expired_for(upstream, old_token)
    oauth.delay = 2.0
    lease = f"{settings.REDIS_KEY_PREFIX}lease:refresh:{account.pk}"

    scheduled = refresh_account_token_task.apply_async(
        args=[account.pk], kwargs={"force": True}, ignore_result=False
    )
    deadline = time.monotonic() + 30
    while not redis_client.exists(lease) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert redis_client.exists(lease)  # the worker holds it, waiting for the token endpoint

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 200
    assert scheduled.get(timeout=30) == "refreshed"
    assert len(oauth.token_calls()) == 1  # the request used the worker's refresh
    row = _row(account)
    assert upstream.tokens_called() == [old_token, row.access_token]


def test_concurrent_401s_on_one_account_refresh_it_once(proxy, upstream, oauth, client_key):
    account = make_oauth_account(oauth, ALICE)
    old_token = account.access_token
    upstream.program(
        old_token, *[Reply(kind="status", status=401, body=TOKEN_EXPIRED) for _ in range(3)]
    )
    oauth.delay = 0.5
    statuses: list[int] = []

    def call() -> None:
        response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
        statuses.append(response.status_code)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert statuses == [200, 200, 200]
    assert len(oauth.token_calls()) == 1
    assert _row(account).status == "active"
    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    assert not redis_client.exists(f"{settings.REDIS_KEY_PREFIX}lease:refresh:{account.pk}")
    redis_client.close()


def test_a_request_refreshes_at_most_one_account(proxy, upstream, oauth, client_key):
    first = make_oauth_account(oauth, ALICE)
    second = make_oauth_account(oauth, Identity("org-bob", "user-bob"))
    third = make_oauth_account(oauth, Identity("org-carol", "user-carol"))
    Account.objects.filter(pk=second.pk).update(added_at=first.added_at.replace(year=2099))
    Account.objects.filter(pk=third.pk).update(added_at=first.added_at.replace(year=2100))
    _expired_for(upstream, first.access_token)
    _expired_for(upstream, second.access_token)
    oauth.fail(first.refresh_token, "unknown")  # the one refresh this request gets fails

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})

    assert response.status_code == 200  # the third account served
    assert upstream.tokens_called() == [
        first.access_token,
        second.access_token,
        third.access_token,
    ]
    # One token call for the whole request: the second 401 demoted its account for the
    # scheduled refresher instead of a second wait on the token endpoint.
    assert [call["refresh_token"] for call in oauth.token_calls()] == [first.refresh_token]
    for account in (first, second):
        row = _row(account)
        assert row.status == "expired" and row.next_refresh_at is not None
