"""Client keys in the console (issue 38 item 3): a key added there is enabled and works on its
first ``/v1`` call; a refused key is told which of missing, unknown or disabled it is, never
seeing its key echoed; the key list shows each key's requests and cost today and this month,
its budgets and limits as bars, and when it was last used."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import requests
from django.contrib.admin.utils import quote
from django.utils import timezone

from common import clock
from proxy.models import ClientApiKey
from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.proxy.conftest import make_pool_account, post_responses

MISSING = "Missing client API key"
UNKNOWN = "Incorrect client API key provided: it is no key of this proxy"
DISABLED = "This client API key is disabled: an operator can enable it again in the console"


@pytest.fixture
def operator(client, db):
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


def _refusal(message: str) -> dict:
    return {
        "error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}
    }


def _upgrade(port: int, authorization: str) -> tuple[int, bytes]:
    """A WebSocket upgrade of ``/v1/responses`` with ``authorization``: (status, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("GET", "/v1/responses")
        for name, value in (
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode()),
            ("Sec-WebSocket-Version", "13"),
            ("Authorization", authorization),
        ):
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_key_added_in_the_console_is_enabled_and_works_on_its_first_call(
    proxy, upstream, operator
):
    make_pool_account("tok-console")
    # given: the add form as the console renders it — the box ticked
    page = operator.get("/admin/proxy/clientapikey/add/")
    assert page.context["adminform"].form["enabled"].value() is True
    assert re.search(r'<input type="checkbox" name="enabled"[^>]* checked', page.content.decode())

    # when: the operator submits it as rendered (a ticked box posts "on")
    response = operator.post(
        "/admin/proxy/clientapikey/add/", {"name": "laptop", "label": "", "enabled": "on"}
    )

    # then: the key is enabled, the message links to its "use" page, and /v1 takes it
    assert response.status_code == 302
    key = ClientApiKey.objects.get(name="laptop")
    assert key.enabled is True
    shown = [str(message) for message in operator.get(response.url).context["messages"]]
    assert any(f"/admin/proxy/clientapikey/{key.pk}/use/" in text for text in shown), shown
    answer = post_responses(proxy, key, {"model": "gpt-5.4", "input": "hi", "stream": False})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed"


def test_the_three_refusals_say_which_and_never_echo_the_key(proxy, upstream, caplog):
    caplog.set_level(logging.DEBUG)
    make_pool_account("tok-refusals")
    disabled = client_api_key_create(name="off", enabled=False, now=timezone.now())
    unknown = "sk_" + "u" * 43
    cases = [
        (None, MISSING),
        ("Token abc", MISSING),
        (f"Bearer {unknown}", UNKNOWN),
        (f"Bearer {disabled.key}", DISABLED),
    ]

    for authorization, message in cases:
        headers = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        responses_answer = requests.post(
            f"{proxy.url}/v1/responses", data='{"model":"gpt-5.4"}', headers=headers, timeout=10
        )
        models_answer = requests.get(f"{proxy.url}/v1/models", headers=headers, timeout=10)

        for answer in (responses_answer, models_answer):
            assert answer.status_code == 401, (authorization, answer.text)
            assert answer.json() == _refusal(message)
            assert answer.headers["x-request-id"]

    status, body = _upgrade(proxy.port, f"Bearer {disabled.key}")
    assert (status, json.loads(body)) == (401, _refusal(DISABLED))
    status, body = _upgrade(proxy.port, f"Bearer {unknown}")
    assert (status, json.loads(body)) == (401, _refusal(UNKNOWN))
    assert upstream.responses_requests() == []
    assert disabled.key not in caplog.text and unknown not in caplog.text
    disabled.refresh_from_db()
    assert disabled.last_used_at is None  # a refused key is not "used"


def test_a_key_disabled_in_the_console_is_told_so_on_its_next_call(proxy, upstream, operator):
    make_pool_account("tok-disable")
    key = client_api_key_create(name="ci", now=timezone.now())
    assert post_responses(proxy, key, {"model": "gpt-5.4", "stream": False}).status_code == 200

    response = operator.post(
        f"/admin/proxy/clientapikey/{quote(key.pk)}/change/",
        {
            "name": key.name,
            "label": "",  # the box unticked: "enabled" not posted
            "policy-TOTAL_FORMS": "0",
            "policy-INITIAL_FORMS": "0",
            "policy-MIN_NUM_FORMS": "0",
            "policy-MAX_NUM_FORMS": "1",
        },
    )

    assert response.status_code == 302
    refused = post_responses(proxy, key, {"model": "gpt-5.4", "stream": False})
    assert (refused.status_code, refused.json()) == (401, _refusal(DISABLED))


# ------------------------------------------------------------------------------ the key list
# A fixed moment mid-month (UTC), so that "today" and "earlier this month" are distinct days.
NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


def _spend(key, at: datetime, *, count: int = 1) -> None:
    """``count`` successes of ``key`` at ``at``, each 100,000 in + 10,000 out of gpt-5.4:
    $0.25 + $0.15 = $0.40 at list price."""
    for _ in range(count):
        usage_record_create(
            created_at=at,
            account_id="acct_keys",
            model="gpt-5.4",
            message="v1 responses completed",
            client_api_key_id=key.pk,
            input_tokens=100_000,
            output_tokens=10_000,
        )


def _row_of(page: str, key) -> str:
    """The list's row of ``key`` (the HTML from its name's link to the row's end)."""
    start = page.index(f'href="/admin/proxy/clientapikey/{quote(key.pk)}/change/')
    return page[start : page.index("</tr>", start)]


def test_the_key_list_shows_spend_budgets_limits_and_last_use(operator):
    with clock.frozen(NOW):
        team = client_api_key_create(name="team", now=NOW - timedelta(days=20))
        idle = client_api_key_create(name="idle", now=NOW - timedelta(days=20))
        key_policy_set(
            key=team,
            values=PolicyValues(
                daily_budget_usd=Decimal("1"),
                monthly_budget_usd=Decimal("10"),
                requests_per_minute=30,
            ),
            now=NOW,
        )
        ClientApiKey.objects.filter(pk=team.pk).update(last_used_at=NOW - timedelta(minutes=5))
        _spend(team, NOW - timedelta(hours=1), count=2)  # today: $0.80
        _spend(team, NOW - timedelta(days=3), count=5)  # this month: + $2.00
        _spend(team, datetime(2026, 2, 27, tzinfo=UTC), count=4)  # last month: not counted
        _spend(idle, datetime(2026, 2, 27, tzinfo=UTC))
        ops_error_log_create(
            created_at=NOW - timedelta(minutes=30),
            message="v1 responses upstream rejected the request",
            client_api_key_id=team.pk,
            status_code=429,
        )

        page = operator.get("/admin/proxy/clientapikey/").content.decode()

    row = _row_of(page, team)
    periods = re.findall(
        r'data-requests="(\d+)" data-cost="([\d.]+)"><span class="key-cost">([^<]+)</span>'
        r"<br>([^<]+)<",
        row,
    )
    assert periods == [
        ("3", "0.8", "$0.8000", "3 requests, 1 failed"),
        ("8", "2.8", "$2.80", "8 requests, 1 failed"),
    ]
    bars = re.findall(
        r'data-limit="([^"]+)">.*?<meter min="0" max="([\d.]+)" value="([\d.]+)".*?'
        r'class="key-bar-value">([^<]+)<',
        row,
    )
    assert bars == [
        ("today", "1.0", "0.8", "$0.8000 of $1.00"),
        ("this month", "10.0", "2.8", "$2.80 of $10.00"),
        ("requests / min", "30", "0", "0 of 30"),
    ]
    assert ">5 minutes ago</span>" in row
    assert team.key not in page and idle.key not in page
    idle_row = _row_of(page, idle)
    assert '<span class="key-unlimited">unlimited</span>' in idle_row
    assert re.findall(r'data-requests="(\d+)"', idle_row) == ["0", "0"]
    assert ">never<" in idle_row
