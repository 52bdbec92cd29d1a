"""No access token, refresh token or authorization code reaches a log line or an error body:
the refresh, the 401 path, onboarding and their failures run with every logger at DEBUG, and
the captured logs (this process's and the Celery worker's) are searched for each secret."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.utils import timezone

from proxy.services.account_tokens import (
    AccountOnboardingError,
    account_tokens_resolve,
)
from proxy.services.oauth_onboarding import oauth_session_exchange, oauth_session_start
from proxy.services.token_refresh import token_refresh_account
from proxy.tasks import refresh_account_token_task
from tests.fakes.codex import Reply
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account, post_responses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]


def test_no_secret_reaches_a_log_line_or_an_error_body(
    caplog, proxy, upstream, oauth, client_key, celery_worker
):
    caplog.set_level(logging.DEBUG)
    secrets: list[str] = []
    bodies: list[str] = []

    # Refreshes that succeed, fail on transport, meet a reused token (in this process).
    good = make_oauth_account(oauth, Identity("org-1", "user-1"))
    flaky = make_oauth_account(oauth, Identity("org-2", "user-2"))
    reused = make_oauth_account(oauth, Identity("org-3", "user-3"))
    oauth.fail(flaky.refresh_token, "drop", "status")
    oauth.fail(reused.refresh_token, "reused", "reused")
    for account in (good, flaky, reused):
        token_refresh_account(account_id=account.pk, sleep=lambda seconds: None)

    # The same in the worker process.
    worker_account = make_oauth_account(oauth, Identity("org-4", "user-4"))
    oauth.fail(worker_account.refresh_token, "status")
    assert celery_worker.run(refresh_account_token_task, worker_account.pk, True) == "refreshed"

    # A 401 whose refresh fails, with no other account: the client's error body.
    lonely = make_oauth_account(oauth, Identity("org-5", "user-5"))
    upstream.program(
        lonely.access_token,
        Reply(kind="status", status=401, body={"error": {"code": "token_expired"}}),
    )
    oauth.fail(lonely.refresh_token, "unknown")
    for other in (good, flaky, reused, worker_account):
        other.refresh_from_db()
        upstream.program(other.access_token, Reply(kind="status", status=402, body={}))
    answer = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    assert answer.status_code >= 400
    bodies.append(answer.text)

    # Onboarding that fails (refused refresh token, exchange failure) and succeeds.
    for tokens in (
        {"access_token": "opaque-secret-token", "refresh_token": None},
        {"access_token": None, "refresh_token": "rt_secret_never_issued"},
    ):
        with pytest.raises(AccountOnboardingError) as refused:
            account_tokens_resolve(now=timezone.now(), **tokens)
        bodies.append(str(refused.value))
        secrets += [value for value in tokens.values() if value]
    oauth.authorize_identity = Identity("org-6", "user-6")
    session = oauth_session_start(now=timezone.now())
    callback = requests.get(session.auth_url, allow_redirects=False, timeout=10).headers["Location"]
    secrets.append(parse_qs(urlsplit(callback).query)["code"][0])
    oauth_session_exchange(session_id=session.session_id, callback_url=callback, now=timezone.now())
    proxy.drain()

    secrets += oauth.issued_access_tokens + oauth.issued_refresh_tokens
    logs = caplog.text + celery_worker.log_path.read_text()
    assert "token refresh of" in caplog.text  # the refreshes did log
    for secret in secrets:
        assert secret not in logs
        for body in bodies:
            assert secret not in body
