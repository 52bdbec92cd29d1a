"""Requests you can follow (issue 38 item 4): the usage records and ops errors lists name the
account and the key, show the cost, filter by time, key, account, model, route and status
without scanning the facts to draw themselves, and each row's page is formatted with links
between an error, its request, its account and its key."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from telemetry.models import OpsErrorLog, UsageRecord
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.proxy.factories import make_account

USAGE = "/admin/telemetry/usagerecord/"
ERRORS = "/admin/telemetry/opserrorlog/"


@pytest.fixture
def operator(client, db):
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


@pytest.fixture
def ledger(db):
    """Two accounts (one later deleted), two keys, successes over a month and failures."""
    now = timezone.now()
    main = make_account(label="main", email="main@example.com")
    spare = make_account(email="spare@example.com")
    laptop = client_api_key_create(name="laptop", now=now)
    ci = client_api_key_create(name="ci", now=now)
    rows = [
        # (age, account, key, model, route)
        (timedelta(minutes=10), main.pk, laptop.pk, "gpt-5.4", "/v1/responses"),
        (timedelta(hours=3), main.pk, ci.pk, "gpt-5.4-mini", "/v1/chat/completions"),
        (timedelta(days=2), spare.pk, laptop.pk, "gpt-5.4", "/v1/responses"),
        (timedelta(days=20), "acct_gone", None, "gpt-5.4", "/v1/responses/compact"),
    ]
    for index, (age, account, key, model, route) in enumerate(rows):
        usage_record_create(
            created_at=now - age,
            account_id=account,
            client_api_key_id=key,
            model=model,
            route=route,
            message="v1 responses completed",
            request_id=f"req_{index}",
            input_tokens=1000,
            output_tokens=200,
            cached_tokens=400,
            transport="http_sse",
        )
    ops_error_log_create(
        created_at=now - timedelta(minutes=11),
        message="v1 responses upstream request failed",
        request_id="req_0",
        account_id=spare.pk,
        client_api_key_id=laptop.pk,
        model="gpt-5.4",
        route="/v1/responses",
        status_code=502,
        upstream_status_code=503,
        failure_class="upstream_unavailable",
        metadata={
            "error": "upstream overloaded",
            "upstreamBody": '{"error": {"message": "overloaded", "token": "[masked]"}}',
            "upstreamBodyTruncated": False,
            "attempts": [{"index": 0, "accountId": spare.pk}, {"index": 1, "accountId": main.pk}],
            "failureSource": "upstream",
        },
    )
    ops_error_log_create(
        created_at=now - timedelta(days=3),
        message="Missing client API key",
        route="/v1/responses",
        status_code=401,
        client_status_code=401,
        failure_class="unauthorized",
    )
    return {"main": main, "spare": spare, "laptop": laptop, "ci": ci, "now": now}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _count(operator, url: str, **parameters: str) -> int:
    response = operator.get(url, parameters)
    assert response.status_code == 200
    return response.context["cl"].result_count


def test_usage_records_name_the_account_and_key_and_show_the_cost(operator, ledger):
    page = operator.get(USAGE)
    text = _text(page.content.decode())

    assert page.status_code == 200
    assert "main" in text and "spare@example.com" in text and "acct_gone (deleted)" in text
    assert "laptop" in text and "ci" in text and "no key" in text
    for raw in (ledger["main"].pk, ledger["spare"].pk, ledger["laptop"].pk, ledger["ci"].pk):
        assert raw not in text  # only in the links' addresses
    # gpt-5.4: 600 uncached × $2.5 + 400 cached × $0.25 + 200 out × $15 per 1M
    assert "$0.0046" in text
    assert "1,000 · 200 · 400" in text
    links = re.findall(
        r'href="(/admin/proxy/(?:account|clientapikey)/[^"]+/change/)"', page.content.decode()
    )
    assert f"/admin/proxy/account/{quote(ledger['main'].pk)}/change/" in links
    assert f"/admin/proxy/clientapikey/{quote(ledger['laptop'].pk)}/change/" in links


def test_the_usage_filters_narrow_the_rows_without_scanning_the_facts(operator, ledger):
    with CaptureQueriesContext(connection) as queries:
        page = operator.get(USAGE)
    statements = [query["sql"] for query in queries.captured_queries]

    assert [spec.title for spec in page.context["cl"].filter_specs] == [
        "time",
        "client key",
        "account",
        "model",
        "route",
        "status",
        "transport",
    ]
    assert [sql for sql in statements if "distinct" in sql.lower()] == []
    assert _count(operator, USAGE) == 4
    assert _count(operator, USAGE, key=ledger["laptop"].pk) == 2
    assert _count(operator, USAGE, key="none") == 1
    assert _count(operator, USAGE, account=ledger["main"].pk) == 2
    assert _count(operator, USAGE, account="acct_gone") == 1  # not listed, still filters
    assert _count(operator, USAGE, model="gpt-5.4-mini") == 1
    assert _count(operator, USAGE, route="/v1/responses") == 2
    assert _count(operator, USAGE, status="200") == 4
    assert _count(operator, USAGE, status="other") == 0
    assert _count(operator, USAGE, created="1h") == 1
    assert _count(operator, USAGE, created="24h") == 2
    assert _count(operator, USAGE, created="7d") == 3
    assert _count(operator, USAGE, created="30d") == 4
    assert _count(operator, USAGE, created="7d", key=ledger["laptop"].pk, model="gpt-5.4") == 2
    local = timezone.localtime(ledger["now"])
    assert (
        _count(
            operator,
            USAGE,
            created_from=(local - timedelta(days=25)).strftime("%Y-%m-%dT%H:%M"),
            created_to=(local - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
        )
        == 2
    )
    sidebar = page.content.decode()
    assert f"?key={ledger['ci'].pk}" in sidebar and "?model=gpt-5.4-mini" in sidebar
    assert "?route=%2Fv1%2Fchat%2Fcompletions" in sidebar
    assert 'name="created_from"' in sidebar


def test_a_custom_range_keeps_the_other_filters(operator, ledger):
    page = operator.get(USAGE, {"key": ledger["laptop"].pk, "created": "7d"}).content.decode()

    form = page[page.index('id="time-range-form"') :].split("</form>")[0]
    assert f'name="key" value="{ledger["laptop"].pk}"' in form
    assert 'name="created"' not in form  # the range replaces the preset
    refused = operator.get(USAGE, {"created_from": "yesterday-ish"})
    assert (refused.status_code, refused["Location"]) == (302, f"{USAGE}?e=1")


def test_the_error_filters_narrow_the_rows(operator, ledger):
    page = operator.get(ERRORS)

    assert [spec.title for spec in page.context["cl"].filter_specs] == [
        "time",
        "client key",
        "account",
        "model",
        "route",
        "status",
        "failure class",
        "transport",
    ]
    text = _text(page.content.decode())
    assert "spare@example.com" in text and "laptop" in text
    assert "502 · — · 503" in text and "401 · 401 · —" in text
    assert _count(operator, ERRORS, key=ledger["laptop"].pk) == 1
    assert _count(operator, ERRORS, key="none") == 1
    assert _count(operator, ERRORS, account=ledger["spare"].pk) == 1
    assert _count(operator, ERRORS, status_class="5xx") == 1
    assert _count(operator, ERRORS, status_class="401") == 1
    assert _count(operator, ERRORS, status_class="429") == 0
    assert _count(operator, ERRORS, created="24h") == 1
    assert _count(operator, ERRORS, model="gpt-5.4", route="/v1/responses") == 1


def _section(page: str, title: str) -> str:
    start = page.index(f'data-section="{title}')
    return _text(page[start:].split("</table>")[0])


def test_a_usage_record_page_is_formatted_and_links_to_its_failed_attempt(operator, ledger):
    record = UsageRecord.objects.get(request_id="req_0")
    error = OpsErrorLog.objects.get(request_id="req_0")

    page = operator.get(f"{USAGE}{quote(record.pk)}/change/").content.decode()

    assert "metadata_json" not in page and "Metadata json" not in page
    who = _section(page, "Who")
    assert "main" in who and "laptop" in who and "its rows" in who
    assert f"{USAGE}?key={ledger['laptop'].pk}" in page
    assert f"{USAGE}?account={ledger['main'].pk}" in page
    tokens = _section(page, "Tokens and cost")
    assert (
        "1,000" in tokens and "$0.0046" in tokens and "gpt-5.4, $2.5 in / $15 out per 1M" in tokens
    )
    assert f'href="{ERRORS}{quote(error.pk)}/change/"' in page
    assert "502 · upstream_unavailable" in _section(page, "This request")


def test_an_error_page_shows_the_upstream_answer_and_links_to_its_request(operator, ledger):
    error = OpsErrorLog.objects.get(request_id="req_0")
    record = UsageRecord.objects.get(request_id="req_0")

    page = operator.get(f"{ERRORS}{quote(error.pk)}/change/").content.decode()

    upstream = _section(page, "Upstream answer")
    assert "upstream status 503" in upstream and "upstream overloaded" in upstream
    assert "&quot;token&quot;: &quot;[masked]&quot;" in page  # the body, preformatted
    assert f'href="{USAGE}{quote(record.pk)}/change/"' in page  # the success it ended in
    attempts = _section(page, "Attempts")
    assert "attempt 0 spare@example.com" in attempts and "attempt 1 main" in attempts
    assert "spare@example.com" in _section(page, "Who")


def test_a_secret_in_an_old_rows_metadata_is_masked_on_its_page(operator, db):
    leaked = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlc2lnbmF0dXJl"
    ops_error_log_create(
        created_at=timezone.now(),
        message="upstream answered 401",
        status_code=401,
        upstream_status_code=401,
        failure_class="expired",
        metadata={"error": f"bad token {leaked}", "note": {"authorization": f"Bearer {leaked}"}},
    )
    error = OpsErrorLog.objects.get()

    page = operator.get(f"{ERRORS}{quote(error.pk)}/change/").content.decode()

    assert leaked not in page
    assert "bad token [masked]" in page
    assert "note · authorization" in page


def test_an_id_shaped_search_finds_exact_ids_only(operator, ledger):
    error = OpsErrorLog.objects.get(request_id="req_0")
    usage_record_create(
        created_at=timezone.now(),
        account_id="acct_other",
        model="gpt-5.4",
        message="retried after req_0 failed",  # the id in words: not what an id search means
    )

    assert _count(operator, USAGE, q="req_0") == 1
    assert _count(operator, ERRORS, q="req_0") == 1
    assert _count(operator, ERRORS, q=error.pk) == 1
    assert _count(operator, USAGE, q="retried") == 1  # words still search the message


def test_the_ids_a_client_reports_are_shown_whole(operator, ledger):
    """A default request id (``req_`` + a UUID: 40 characters) and a response id (``resp_`` +
    50 hex) are what a client quotes; the masking of long opaque runs must not hide them."""
    request_id = "req_0b6f3c1e9a7d4f2b8c5e1a3d7f9b2c4e"
    response_id = "resp_" + "0123456789abcdef" * 3 + "01"
    usage_record_create(
        created_at=ledger["now"],
        account_id=ledger["main"].pk,
        client_api_key_id=ledger["laptop"].pk,
        model="gpt-5.4",
        route="/v1/responses",
        message="v1 responses completed",
        request_id=request_id,
        response_id=response_id,
        input_tokens=10,
        output_tokens=5,
    )
    error = ops_error_log_create(
        created_at=ledger["now"],
        message="v1 responses upstream request failed",
        request_id=request_id,
        response_id=response_id,
        route="/v1/responses",
        status_code=502,
    )
    record = UsageRecord.objects.get(request_id=request_id)

    for page in (
        operator.get(f"{USAGE}{quote(record.pk)}/change/").content.decode(),
        operator.get(f"{ERRORS}{quote(error.pk)}/change/").content.decode(),
    ):
        assert request_id in page and response_id in page
