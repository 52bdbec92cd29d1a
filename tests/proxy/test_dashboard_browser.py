"""The operators' dashboard in headless Chromium (Debian's chromium, offline): log in on the
Django admin's page, open the dashboard, and see the charts drawn from the admin API for a
seeded day; the page refreshes itself. Screenshot: var/screenshots/dashboard.png."""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from datetime import timezone as fixed_timezone

import pytest
from django.utils import timezone

from proxy.models import AccountUsage
from proxy.services.admin_users import admin_user_create_default
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.proxy.factories import make_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]
PASSWORD = "correct horse battery staple"
CHINA = fixed_timezone(timedelta(hours=8))


@pytest.fixture
def seeded_day():
    now = timezone.now()
    runtime_settings_ensure(now=now)
    fingerprint_ensure_current(now=now)
    admin_user_create_default(password=PASSWORD, now=now)
    midnight = now.astimezone(CHINA).replace(hour=0, minute=0, second=0, microsecond=0)
    midnight = midnight.astimezone(UTC)
    elapsed = now - midnight
    make_account(
        id="acct_one",
        email="one@example.com",
        plan_type="plus",
        access_token_expires_at=now + timedelta(days=1),
        quota_json={
            "snapshots": [
                {
                    "source": "core",
                    "primary": {
                        "used_percent": 20,
                        "window_minutes": 300,
                        "reset_at": int((now + timedelta(hours=2)).timestamp()),
                    },
                }
            ]
        },
    )
    make_account(id="acct_two", email="two@example.com", status="quota_exhausted")
    for index in range(12):
        usage_record_create(
            created_at=midnight + elapsed * (index + 1) / 13,
            account_id="acct_one" if index % 2 else "acct_two",
            model="gpt-5.4",
            message="v1 responses completed",
            input_tokens=1000 + 100 * index,
            output_tokens=200 + 10 * index,
            cached_tokens=300,
            first_token_ms=150 + 20 * index,
            latency_ms=900 + 50 * index,
            request_id=f"req_{index}",
        )
    for index in range(3):
        ops_error_log_create(
            created_at=midnight + elapsed * (2 * index + 1) / 7,
            message="v1 responses dispatch failed",
            account_id="acct_one",
            status_code=502,
            failure_class="upstream_unavailable",
        )
    AccountUsage.objects.create(
        account_id="acct_one",
        request_count=40,
        total_tokens=30_000,
        input_tokens=25_000,
        cached_tokens=4_000,
        last_used_at=now,
    )


def _log_in(browser, server, next_path: str = "/admin/dashboard/") -> None:
    browser.open(f"{server.url}/admin/login/?next={next_path}")
    browser.driver.find_element("name", "username").send_keys("admin")
    browser.driver.find_element("name", "password").send_keys(PASSWORD)
    browser.driver.find_element("css selector", "input[type=submit]").click()
    browser.wait_until(
        lambda: browser.script("return location.pathname") == next_path,
        what=f"{next_path} after log-in",
    )


def _dataset_sum(browser, canvas_id: str, index: int = 0) -> float:
    return browser.script(
        "const c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c ? c.data.datasets[arguments[1]].data.reduce((a, b) => a + (b || 0), 0) : -1;",
        canvas_id,
        index,
    )


def test_the_dashboard_draws_the_seeded_day_and_refreshes_itself(
    browser, https_live_server, seeded_day, settings
):
    settings.ADMIN_DASHBOARD_REFRESH_SECONDS = 1
    browser.driver.set_window_size(1280, 1900)

    _log_in(browser, https_live_server)
    browser.wait_until(
        lambda: (
            browser.script("return document.getElementById('dashboard').dataset.state") == "ready"
        ),
        what="the dashboard's first data",
    )

    assert _dataset_sum(browser, "chart-requests", 0) == 15  # 12 successes + 3 errors
    assert _dataset_sum(browser, "chart-requests", 1) == 3
    assert _dataset_sum(browser, "chart-tokens", 0) == sum(1000 + 100 * i for i in range(12))
    assert _dataset_sum(browser, "chart-latency", 0) > 0
    assert _dataset_sum(browser, "chart-pool", 0) == 2
    assert browser.script("return document.getElementById('card-requests').textContent") == "15"
    cells = browser.script(
        "return Array.from(document.querySelectorAll('#health-timeline span'))"
        ".map(s => s.className)"
    )
    assert len(cells) == 96
    assert {"h2", "h3", "h4", "h5"} & set(cells)
    rows = browser.script("return document.querySelectorAll('#latest-records tbody tr').length")
    assert rows == 10
    runway_rows = browser.script(
        "return Array.from(document.querySelectorAll('#runway-accounts tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    assert [row[0] for row in runway_rows] == ["one@example.com", "two@example.com"]
    assert runway_rows[0][2].startswith("20% · ") and runway_rows[1][2] == "-"
    pool_five_hour = browser.script(
        "return document.getElementById('runway-five-hour').textContent"
    )
    assert re.fullmatch(r"runs out \d{4}-\d\d-\d\d \d\d:\d\d|not burning|not known", pool_five_hour)
    browser.wait_until(
        lambda: (
            int(browser.script("return document.getElementById('dashboard').dataset.refreshes"))
            >= 2
        ),
        what="a refresh",
    )
    browser.screenshot("dashboard")
    violations = [
        entry["message"] for entry in browser.console() if "Content Security" in entry["message"]
    ]
    assert violations == []
    errors = [
        entry["message"]
        for entry in browser.console()
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert errors == []


def test_the_connection_test_page_streams_the_test_from_the_accounts_list(
    browser, https_live_server, seeded_day, upstream
):
    from proxy.models import Account
    from tests.fakes.codex import Reply

    Account.objects.filter(pk="acct_one").update(access_token="tok-browser")
    upstream.program("tok-browser", Reply(text="ok, all good", deltas=3))
    _log_in(browser, https_live_server, "/admin/proxy/account/")
    browser.driver.find_element(
        "css selector", 'a[href="/admin/proxy/account/acct_one/test/"]'
    ).click()
    browser.wait_until(lambda: browser.script("return !!document.getElementById('test-run')"))

    browser.driver.find_element("id", "test-run").click()
    browser.wait_until(
        lambda: (
            browser.script("return document.getElementById('account-test').dataset.state")
            == "success"
        ),
        what="the test to succeed",
    )

    output = browser.script("return document.getElementById('test-output').textContent")
    assert "ok, all good" in output and "success" in output
    browser.screenshot("account-test")
    assert Account.objects.get(pk="acct_one").status == "active"
