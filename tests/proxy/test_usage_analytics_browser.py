"""Usage analytics and the dashboard's range tabs in headless Chromium (Debian's chromium,
offline) over a seeded month: three accounts, three keys, two models. One log-in, then what an
operator does: read the charts (their numbers read back from Chart.js equal the seeded facts),
switch range tabs, filter and break down, download the CSV (it adds up to the buckets), switch
the dashboard to 7 days. Screenshots: var/screenshots/usage-analytics-30d.png,
usage-analytics-key.png and dashboard-7d.png (docs/console.md)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, timedelta

import pytest
from django.db import connection
from django.utils import timezone
from selenium.webdriver.support.ui import Select

from proxy.services.admin_users import admin_user_create_default
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from tests.proxy.usage_month import seed_month
from tests.telemetry.month_of_facts import midnight

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.usefixtures("console_in_utc"),
]


PASSWORD = "correct horse battery staple"


@pytest.fixture
def month():
    now = timezone.now()
    runtime_settings_ensure(now=now)
    fingerprint_ensure_current(now=now)
    admin_user_create_default(password=PASSWORD, now=now)
    return seed_month(now)


def _count(facts, zone, days: int, **equal) -> int:
    start = midnight(facts.now, zone, days_back=days - 1)
    end = midnight(facts.now, zone) + timedelta(days=1)
    return len(facts.successes_between(start, end, **equal)) + len(
        facts.failures_between(start, end, **equal)
    )


def _data(browser, canvas_id: str, index: int = 0) -> list:
    return browser.script(
        "const c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c ? c.data.datasets[arguments[1]].data : null;",
        canvas_id,
        index,
    )


def _text(browser, element_id: str) -> str:
    return browser.script("return document.getElementById(arguments[0]).textContent", element_id)


def _follow(browser, click) -> None:
    """Click something that loads another page; wait for that page's charts."""
    browser.script("window.previousPage = true")
    click()
    browser.wait_until(
        lambda: browser.script(
            "const root = document.getElementById('usage-analytics');"
            "return !window.previousPage && root && root.dataset.state === 'ready'"
        ),
        what="the next usage page",
    )


def test_usage_analytics_and_the_dashboard_tabs_over_a_seeded_month(
    browser, https_live_server, month
):
    facts = month.facts
    browser.driver.set_window_size(1366, 1900)
    browser.open(f"{https_live_server.url}/admin/login/?next=/admin/usage/%3Frange%3D30d")
    browser.driver.find_element("name", "username").send_keys("admin")
    browser.driver.find_element("name", "password").send_keys(PASSWORD)
    _follow(browser, browser.driver.find_element("css selector", "input[type=submit]").click)

    # 30 days by model: the charts carry the seeded numbers.
    start, end = (
        midnight(facts.now, UTC, days_back=29),
        midnight(facts.now, UTC) + timedelta(days=1),
    )
    successes = facts.successes_between(start, end)
    thirty = _count(facts, UTC, 30)
    assert sum(_data(browser, "chart-usage-requests", 0)) == thirty
    assert sum(_data(browser, "chart-usage-requests", 1)) == len(facts.failures_between(start, end))
    assert sum(_data(browser, "chart-usage-tokens", 0)) == sum(f.input_tokens for f in successes)
    assert len(_data(browser, "chart-usage-cost")) == 30
    labels = browser.script(
        "return Chart.getChart(document.getElementById('chart-usage-groups')).data.labels"
    )
    assert sorted(labels) == ["gpt-5.4", "gpt-5.5"]
    assert _text(browser, "card-requests") == f"{thirty:,}"
    browser.screenshot("usage-analytics-30d")

    # The range tabs change the totals.
    _follow(browser, browser.driver.find_element("css selector", "a[data-range='7d']").click)
    assert _text(browser, "card-requests") == f"{_count(facts, UTC, 7):,}"
    assert sum(_data(browser, "chart-usage-requests", 0)) == _count(facts, UTC, 7)
    _follow(browser, browser.driver.find_element("css selector", "a[data-range='today']").click)
    assert _text(browser, "card-requests") == f"{_count(facts, UTC, 1):,}"
    _follow(browser, browser.driver.find_element("css selector", "a[data-range='30d']").click)

    # A key filter and a breakdown by account narrow the rows.
    ci = month.keys["ci-runner"].pk
    Select(browser.driver.find_element("id", "filter-key")).select_by_value(ci)
    Select(browser.driver.find_element("id", "filter-by")).select_by_value("account")
    _follow(browser, browser.driver.find_element("id", "filters-apply").click)
    rows = browser.script(
        "return Array.from(document.querySelectorAll('#usage-breakdown tbody tr'))"
        ".map(r => [r.cells[0].textContent, r.cells[1].textContent])"
    )
    expected = {
        name: _count(facts, UTC, 30, client_api_key_id=ci, account_id=account_id)
        for account_id, name in (
            ("acct_alpha", "Alpha team"),
            ("acct_beta", "beta@example.com"),
            ("acct_gamma", "gamma@example.com"),
        )
    }
    assert {name: int(count.replace(",", "")) for name, count in rows} == {
        name: count for name, count in expected.items() if count
    }
    assert _text(browser, "card-requests") == f"{_count(facts, UTC, 30, client_api_key_id=ci):,}"
    assert sum(_data(browser, "chart-usage-groups", 0)) == sum(expected.values())
    browser.screenshot("usage-analytics-key")

    # The CSV export of 30 days by model adds up to the buckets.
    Select(browser.driver.find_element("id", "filter-key")).select_by_value("")
    Select(browser.driver.find_element("id", "filter-by")).select_by_value("model")
    _follow(browser, browser.driver.find_element("id", "filters-apply").click)
    exported = browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(document.getElementById('usage-csv').href).then(r => r.text()).then(done);"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "select date_trunc('day', bucket_start at time zone 'UTC')::date::text, model,"
            " sum(success_count + error_count), sum(input_tokens + output_tokens)"
            " from request_time_buckets where bucket_start >= %s and bucket_start < %s"
            " group by 1, 2",
            [start, end],
        )
        buckets = {(day, model): (int(a), int(b)) for day, model, a, b in cursor.fetchall()}
    assert {
        (row["period_start"][:10], row["group"]): (
            int(row["requests"]),
            int(row["input_tokens"]) + int(row["output_tokens"]),
        )
        for row in csv.DictReader(io.StringIO(exported))
    } == buckets

    # The dashboard's 7-day tab: the console's days (UTC here), from the same buckets.
    browser.open(f"{https_live_server.url}/admin/dashboard/")
    browser.wait_until(
        lambda: (
            browser.script("return document.getElementById('dashboard').dataset.state") == "ready"
        ),
        what="the dashboard's first data",
    )
    assert _text(browser, "card-requests") == f"{_count(facts, UTC, 1):,}"
    browser.driver.find_element("css selector", "#dashboard-range-tabs [data-range='7d']").click()
    browser.wait_until(
        lambda: (
            _text(browser, "dashboard-range-label") == "Last 7 days"
            and browser.script("return document.getElementById('dashboard').dataset.state")
            == "ready"
        ),
        what="the 7-day tab",
    )
    seven = _count(facts, UTC, 7)
    assert _text(browser, "card-requests") == f"{seven:,}"
    assert sum(_data(browser, "chart-requests", 0)) == seven
    assert len(_data(browser, "chart-requests", 0)) == 7
    assert browser.script("return location.search") == "?range=7d"
    browser.screenshot("dashboard-7d")

    messages = [entry["message"] for entry in browser.console()]
    assert [message for message in messages if "Content Security" in message] == []
    severe = [
        entry["message"]
        for entry in browser.console()
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert severe == []
