"""The fact tables' admin filters: they filter, and drawing them never scans the table."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from proxy.services.admin_users import admin_user_create_default
from telemetry.services.ledger import ops_error_log_create, usage_record_create


@pytest.fixture
def operator(client, db):
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """Read right after the block: the next request starts with an empty query log."""
    return [query["sql"] for query in queries.captured_queries]


def test_usage_records_filter_by_transport_without_select_distinct(operator):
    now = timezone.now()
    for transport in ("http_sse", "http_sse", "http"):
        usage_record_create(
            created_at=now, account_id="a", model="m", message="ok", transport=transport
        )

    with CaptureQueriesContext(connection) as queries:
        page = operator.get("/admin/telemetry/usagerecord/")
    statements = _statements(queries)
    compact = operator.get("/admin/telemetry/usagerecord/", {"transport": "http"})
    streamed = operator.get("/admin/telemetry/usagerecord/", {"transport": "http_sse"})

    assert page.status_code == 200
    assert statements  # the page did query the database...
    assert [sql for sql in statements if "distinct" in sql.lower()] == []  # ...but never this
    # The console's list (proxy.admin_requests) adds time, key, account, model, route, status.
    assert [spec.title for spec in page.context["cl"].filter_specs][-1] == "transport"
    assert "?transport=websocket" in page.content.decode()
    assert compact.context["cl"].result_count == 1
    assert streamed.context["cl"].result_count == 2


def test_ops_error_logs_filter_by_class_status_and_transport_without_select_distinct(operator):
    now = timezone.now()
    ops_error_log_create(
        created_at=now,
        message="all accounts exhausted",
        failure_class="no_available_accounts",
        status_code=503,
    )
    ops_error_log_create(
        created_at=now,
        message="upstream answered 400",
        failure_class="upstream",
        status_code=400,
        transport="http_sse",
    )
    ops_error_log_create(
        created_at=now,
        message="client left",
        failure_class="client_cancelled",
        status_code=499,
        transport="http_sse",
    )

    with CaptureQueriesContext(connection) as queries:
        page = operator.get("/admin/telemetry/opserrorlog/")
    statements = _statements(queries)

    def count(**parameters: str) -> int:
        response = operator.get("/admin/telemetry/opserrorlog/", parameters)
        assert response.status_code == 200
        return response.context["cl"].result_count

    assert page.status_code == 200
    assert statements  # the page did query the database...
    assert [sql for sql in statements if "distinct" in sql.lower()] == []  # ...but never this
    assert [spec.title for spec in page.context["cl"].filter_specs][-3:] == [
        "status",
        "failure class",
        "transport",
    ]
    assert "?failure_class=rate_limited" in page.content.decode()
    assert count(failure_class="upstream") == 1
    assert count(failure_class="rate_limited") == 0
    # The taxonomy is open: a class the sidebar does not list still filters from the URL.
    ops_error_log_create(created_at=now, message="new", failure_class="brand_new_class")
    assert count(failure_class="brand_new_class") == 1
    assert count(status_class="4xx") == 2
    assert count(status_class="5xx") == 1
    assert count(transport="http_sse") == 2
    assert count(transport="http_sse", status_class="4xx", failure_class="upstream") == 1
