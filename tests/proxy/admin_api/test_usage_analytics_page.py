"""The console's usage analytics page (``/admin/usage/``) and its CSV export over a seeded
month: what an operator reads there (cards, rows with names, notes on the sources), the
filters and range tabs, and a CSV that adds up to the buckets."""

from __future__ import annotations

import csv
import io
from datetime import UTC, timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from proxy.models import ClientApiKey
from tests.proxy.admin_api.conftest import PASSWORD
from tests.proxy.page_text import PageText
from tests.proxy.usage_month import seed_month
from tests.telemetry.month_of_facts import midnight

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("console_in_utc")]


@pytest.fixture
def month(admin):
    return seed_month(timezone.now())


@pytest.fixture
def operator(admin) -> Client:
    client = Client()
    assert client.login(username="admin", password=PASSWORD)
    return client


def _page(operator: Client, query: str = "") -> PageText:
    response = operator.get(f"/admin/usage/?{query}")
    assert response.status_code == 200, response.content
    return PageText(response.content.decode())


def _days(month, days: int) -> tuple:
    now = month.facts.now
    return midnight(now, UTC, days_back=days - 1), midnight(now, UTC) + timedelta(days=1)


def _csv(operator: Client, query: str) -> list[dict]:
    response = operator.get(f"/admin/usage/export.csv?{query}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="usage-')
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_the_page_and_its_export_need_the_admin_log_in(db):
    for path in ("/admin/usage/", "/admin/usage/export.csv"):
        response = Client().get(path)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_seven_days_by_model_shows_the_seeded_sums(month, operator):
    start, end = _days(month, 7)
    successes = month.facts.successes_between(start, end)
    failures = month.facts.failures_between(start, end)

    response = operator.get("/admin/usage/?range=7d")
    page = PageText(response.content.decode())

    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert page.text("card-requests") == f"{len(successes) + len(failures):,}"
    assert page.text("card-requests-detail").startswith(
        f"{len(successes):,} succeeded · {len(failures):,} failed · error rate "
    )
    tokens = sum(fact.input_tokens + fact.output_tokens for fact in successes)
    assert page.text("card-tokens") == f"{tokens:,}"
    reasoning = sum(fact.reasoning_tokens for fact in successes)
    assert page.text("card-tokens-detail").endswith(f"reasoning {reasoning:,}")
    assert page.text("range-span").startswith(
        f"Last 7 days: {start:%Y-%m-%d} 00:00 to {end:%Y-%m-%d} 00:00 (UTC), per day."
    )
    rows = {row[0]: row for row in page.rows("usage-breakdown")}
    assert set(rows) == {"gpt-5.4", "gpt-5.5"}
    for model, row in rows.items():
        mine = [fact for fact in successes if fact.model == model]
        errors = [fact for fact in failures if fact.model == model]
        assert row[1:3] == [f"{len(mine) + len(errors):,}", f"{len(errors):,}"]
        assert row[4] == f"{sum(fact.input_tokens for fact in mine):,}"
    charts = page.json("usage-chart-data")
    assert charts["period"] == "day" and len(charts["labels"]) == 7
    assert sum(charts["requests"]) == len(successes) + len(failures)
    assert sum(charts["errors"]) == len(failures)
    assert sum(charts["groups"]["requests"]) == len(successes) + len(failures)
    assert "From the 15-minute buckets" in page.text("usage-notes")
    index = operator.get("/admin/").content.decode()
    assert 'href="/admin/usage/"' in index


def test_the_range_tabs_change_the_totals(month, operator):
    counts = {}
    for name, days in (("today", 1), ("7d", 7), ("30d", 30)):
        start, end = _days(month, days)
        expected = len(month.facts.successes_between(start, end)) + len(
            month.facts.failures_between(start, end)
        )
        page = _page(operator, f"range={name}")
        counts[name] = page.text("card-requests")
        assert counts[name] == f"{expected:,}"
    assert len(set(counts.values())) == 3
    first = (month.facts.now - timedelta(days=33)).date()
    last = (month.facts.now - timedelta(days=31)).date()
    custom = _page(operator, f"range=custom&start={first}&end={last}")
    start = midnight(month.facts.now, UTC, days_back=33)
    end = midnight(month.facts.now, UTC, days_back=30)
    expected = len(month.facts.successes_between(start, end)) + len(
        month.facts.failures_between(start, end)
    )
    assert custom.text("card-requests") == f"{expected:,}"
    assert custom.text("range-span").startswith(f"{first} – {last}:")


def test_breakdowns_name_accounts_keys_and_statuses(month, operator):
    ClientApiKey.objects.filter(pk=month.keys["bob-desktop"].pk).delete()
    bob = month.keys["bob-desktop"].pk

    accounts = [row[0] for row in _page(operator, "range=30d&by=account").rows("usage-breakdown")]
    keys = _page(operator, "range=30d&by=key")
    statuses = [row[0] for row in _page(operator, "range=30d&by=status").rows("usage-breakdown")]
    routes = [row[0] for row in _page(operator, "range=30d&by=route").rows("usage-breakdown")]

    assert sorted(accounts) == ["Alpha team", "beta@example.com", "gamma@example.com"]
    assert {row[0] for row in keys.rows("usage-breakdown")} == {
        "alice-laptop",
        f"{bob} (deleted)",
        "ci-runner",
    }
    assert "the buckets have no key, route or status" in keys.text("usage-notes")
    assert statuses == ["200 OK", "429 Too Many Requests", "502 Bad Gateway"]
    assert sorted(routes) == ["/v1/chat/completions", "/v1/responses"]
    reasoning = [row[7] for row in keys.rows("usage-breakdown")]
    assert all(value.replace(",", "").isdigit() for value in reasoning)


def test_a_row_links_to_its_filter_and_the_filter_narrows_the_rows(month, operator):
    start, end = _days(month, 30)
    by_key = _page(operator, "range=30d&by=key")
    ci = month.keys["ci-runner"].pk
    link = next(href for href in by_key.row_links("usage-breakdown") if ci in href)

    narrowed = _page(operator, urlparse(link).query)
    by_model = _page(operator, f"range=30d&by=model&key={ci}")

    assert parse_qs(urlparse(link).query)["key"] == [ci]
    assert [row[0] for row in narrowed.rows("usage-breakdown")] == ["ci-runner"]
    mine = month.facts.successes_between(start, end, client_api_key_id=ci)
    errors = month.facts.failures_between(start, end, client_api_key_id=ci)
    assert narrowed.text("card-requests") == f"{len(mine) + len(errors):,}"
    assert {row[0]: row[1] for row in by_model.rows("usage-breakdown")} == {
        model: f"{len([f for f in mine + errors if f.model == model]):,}"
        for model in ("gpt-5.4", "gpt-5.5")
    }
    failed = _page(operator, "range=30d&by=model&status=failed")
    assert failed.text("card-requests") == f"{len(month.facts.failures_between(start, end)):,}"
    assert failed.text("card-latency-detail") == "p50 - · p95 - · p99 -"
    nothing = _page(operator, "range=30d&model=gpt-9")
    assert nothing.rows("usage-breakdown") == [["No requests in this range with these filters."]]


def test_the_csv_export_adds_up_to_the_buckets(month, operator):
    rows = _csv(operator, "range=30d&by=model")

    start, end = _days(month, 30)
    with connection.cursor() as cursor:
        cursor.execute(
            "select date_trunc('day', bucket_start at time zone 'UTC'), model,"
            " sum(success_count), sum(error_count), sum(input_tokens), sum(output_tokens),"
            " sum(cached_tokens) from request_time_buckets"
            " where bucket_start >= %s and bucket_start < %s group by 1, 2",
            [start, end],
        )
        buckets = {
            (day.date().isoformat(), model): [int(value) for value in sums]
            for day, model, *sums in cursor.fetchall()
        }
    exported = {
        (row["period_start"][:10], row["group"]): [
            int(row[name])
            for name in ("succeeded", "failed", "input_tokens", "output_tokens", "cached_tokens")
        ]
        for row in rows
    }
    assert exported == buckets
    assert all(row["period_start"].endswith("T00:00:00+00:00") for row in rows)
    assert all(int(row["requests"]) == int(row["succeeded"]) + int(row["failed"]) for row in rows)
    assert {row["reasoning_tokens"] for row in rows} == {""}  # the buckets keep none
    total_cost = sum(float(row["cost_usd"]) for row in rows)
    page = _page(operator, "range=30d&by=model")
    assert page.text("card-cost") == (
        f"${total_cost:,.2f}" if total_cost >= 1 else f"${total_cost:.4f}"
    )


def test_the_csv_by_key_adds_up_to_the_facts(month, operator):
    rows = _csv(operator, "range=7d&by=key")

    start, end = _days(month, 7)
    for name, key in month.keys.items():
        mine = [row for row in rows if row["group"] == key.pk]
        assert {row["name"] for row in mine} == {name}
        successes = month.facts.successes_between(start, end, client_api_key_id=key.pk)
        assert sum(int(row["succeeded"]) for row in mine) == len(successes)
        assert sum(int(row["reasoning_tokens"]) for row in mine) == sum(
            fact.reasoning_tokens for fact in successes
        )


def test_parameters_that_cannot_be_shown_are_said_and_left_out(month, operator):
    page = _page(operator, "range=custom&start=soon&end=2026-01-01&by=colour&status=teapot")

    problems = page.text("content")
    assert "Range not shown: the first day must be a date (YYYY-MM-DD). Showing today." in problems
    assert "There is no breakdown by 'colour': by model." in problems
    assert "The status filter is ok, failed or an HTTP status: left out." in problems
    start, end = _days(month, 1)
    expected = len(month.facts.successes_between(start, end)) + len(
        month.facts.failures_between(start, end)
    )
    assert page.text("card-requests") == f"{expected:,}"


def test_the_notes_say_how_far_back_the_tables_reach_and_what_was_sampled(
    month, operator, monkeypatch
):
    monkeypatch.setattr("telemetry.queries.usage_analytics.SAMPLE_LIMIT", 5)
    old = (month.facts.now - timedelta(days=200)).date()

    sampled = _page(operator, "range=30d")
    year = _page(operator, f"range=custom&start={old}&end={month.facts.now.date()}&by=route")

    notes = sampled.text("usage-notes")
    assert "Percentiles and reasoning tokens (*): the newest 5 successful requests" in notes
    assert all(row[7].endswith(" *") for row in sampled.rows("usage-breakdown"))
    assert "Usage records are kept 30 days and ops errors 30 days" in year.text("usage-notes")
    buckets = _page(operator, f"range=custom&start={old}&end={month.facts.now.date()}")
    assert "Buckets are kept 90 days: nothing before" in buckets.text("usage-notes")


@pytest.mark.parametrize(
    "query",
    [
        "range=custom&start=9999-12-31&end=9999-12-31",
        "range=custom&start=0001-01-01&end=0001-01-01",
        "range=custom&start=0001-01-02&end=0001-01-05",
        "status=%C2%B9%C2%B2%C2%B3",  # digits to str.isdigit, not to int()
    ],
)
def test_far_off_dates_and_unicode_digits_are_said_not_a_500(db, operator, query):
    page = _page(operator, query)

    assert "Showing today." in page.text("content") or "left out." in page.text("content")
    # The export refuses what the page had to change, rather than export something else.
    refused = operator.get(f"/admin/usage/export.csv?{query}")
    assert refused.status_code == 400
    assert "left out" in refused.content.decode() or "Showing today" in refused.content.decode()


def test_the_export_marks_a_name_a_spreadsheet_would_run(db):
    from proxy.admin_usage.report import spreadsheet_safe

    assert spreadsheet_safe('=HYPERLINK("http://x","a")') == '\'=HYPERLINK("http://x","a")'
    assert [spreadsheet_safe(text) for text in ("+1", "-2", "@a", "\tb")] == [
        "'+1",
        "'-2",
        "'@a",
        "'\tb",
    ]
    assert spreadsheet_safe("gpt-5.4") == "gpt-5.4"
