"""The connection test (spec §6.3) streamed as server-sent events through the real ASGI server,
and what its outcome does to the account."""

from __future__ import annotations

import json
import time

import pytest
import requests
from django.utils import timezone

from proxy.models import Account
from proxy.services.admin_users import admin_user_create_default
from proxy.sessions import admin_session_login
from tests.fakes.codex import Reply
from tests.proxy.admin_api.conftest import COOKIE, PASSWORD
from tests.proxy.conftest import make_pool_account

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session_cookie(proxy):
    admin = admin_user_create_default(password=PASSWORD, now=timezone.now())
    token, _ = admin_session_login(user=admin, now=timezone.now())
    return {COOKIE: token}


def run_test(
    proxy, cookies, account_id: str, model: str = "gpt-5.4"
) -> tuple[requests.Response, list]:
    response = requests.get(
        f"{proxy.url}/api/admin/accounts/test",
        params={"id": account_id, "modelId": model},
        cookies=cookies,
        # What an EventSource (the console's test page) asks for.
        headers={"Accept": "text/event-stream"},
        stream=True,
        timeout=30,
    )
    events = []
    for line in response.iter_lines():
        if line.startswith(b"data: "):
            events.append(json.loads(line[6:]))
    return response, events


def test_a_successful_test_streams_its_events_and_puts_the_account_back(
    proxy, upstream, session_cookie
):
    account = make_pool_account("tok-test", status="quota_exhausted")
    upstream.program("tok-test", Reply(text="ok", deltas=2))

    response, events = run_test(proxy, session_cookie, account.pk)

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["Cache-Control"] == "no-store"
    assert [event["type"] for event in events] == [
        "test_start",
        "request",
        "content",
        "content",
        "test_complete",
    ]
    assert events[1]["payload"]["instructions"] == "reply with ok"
    assert events[1]["payload"]["store"] is False
    assert "".join(event["text"] for event in events if event["type"] == "content") == "ok"
    assert events[-1] == {"type": "test_complete", "success": True}
    [sent] = upstream.responses_requests()
    assert sent.header("authorization") == "Bearer tok-test"
    assert json.loads(sent.body)["model"] == "gpt-5.4"
    assert Account.objects.get(pk=account.pk).status == "active"
    # The token never reaches the operator's stream.
    assert "tok-test" not in json.dumps(events)


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (Reply(kind="status", status=402, body={"detail": "payment required"}), "quota_exhausted"),
        (Reply(kind="status", status=401, body={"error": {"code": "token_expired"}}), "expired"),
        (Reply(kind="status", status=403, body={"detail": "account deactivated"}), "banned"),
        (Reply(kind="failed", code="insufficient_quota", message="quota"), "quota_exhausted"),
    ],
)
def test_a_failed_test_reports_the_error_and_demotes_the_account(
    proxy, upstream, session_cookie, reply, status
):
    account = make_pool_account("tok-fail")
    upstream.program("tok-fail", reply)

    _, events = run_test(proxy, session_cookie, account.pk)

    assert events[-1]["type"] == "error" and events[-1]["error"]
    assert Account.objects.get(pk=account.pk).status == status


def test_a_disabled_account_is_tested_but_keeps_its_status(proxy, upstream, session_cookie):
    account = make_pool_account("tok-off", status="disabled")
    upstream.program("tok-off", Reply(kind="status", status=401, body={}))

    _, events = run_test(proxy, session_cookie, account.pk)

    assert events[-1]["type"] == "error"
    assert Account.objects.get(pk=account.pk).status == "disabled"


def test_the_test_needs_an_admin(proxy, upstream):
    account = make_pool_account("tok-anon")

    response = requests.get(
        f"{proxy.url}/api/admin/accounts/test",
        params={"id": account.pk},
        headers={"Accept": "text/event-stream"},
        timeout=10,
    )

    # Refused in the JSON envelope, whatever the Accept header asked for.
    assert response.status_code == 401 and response.json()["code"] == 40101
    assert upstream.responses_requests() == []


def test_a_dripping_upstream_stops_the_test_at_its_deadline(
    proxy, upstream, session_cookie, settings
):
    settings.ADMIN_UPSTREAM_DEADLINE_SECONDS = 2
    account = make_pool_account("tok-slow", status="active")
    # Each delta arrives in time for any per-read timeout, the whole answer never does.
    upstream.program("tok-slow", Reply(text="o" * 40, deltas=40, delta_delay=0.5))
    started = time.monotonic()

    response, events = run_test(proxy, session_cookie, account.pk)

    took = time.monotonic() - started
    assert response.status_code == 200
    assert events[-1] == {
        "type": "error",
        "error": "no complete answer within 2 s; test stopped",
    }
    assert "test_complete" not in [event["type"] for event in events]
    assert took < 12, took  # the whole answer takes 20 s; the slack is for a loaded machine
    assert Account.objects.get(pk=account.pk).status == "active"


def test_an_upstream_that_never_answers_stops_the_test_at_its_deadline(
    proxy, upstream, session_cookie, settings
):
    settings.ADMIN_UPSTREAM_DEADLINE_SECONDS = 1
    account = make_pool_account("tok-hung", status="active")
    upstream.program("tok-hung", Reply(first_byte_delay=30))
    started = time.monotonic()

    _, events = run_test(proxy, session_cookie, account.pk)

    assert events[-1]["error"] == "no complete answer within 1 s; test stopped"
    assert time.monotonic() - started < 5
