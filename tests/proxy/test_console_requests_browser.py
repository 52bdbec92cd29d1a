"""The accounts at a glance and the request lists in headless Chromium (issue 38 items 2 and
4), over seeded data (five accounts, three keys, a month of usage records and failures), in
one logged-in session at 1366 × 900: the accounts list is not clipped and its bars carry the
seeded figures, the row actions read the quota, disable an account and refresh tokens; the
request lists show names, their filters narrow the rows; a request's page links to its failed
attempt, whose page shows the upstream's answer with secrets masked and links back.

Screenshots (var/screenshots/): accounts-glance.png, accounts-actions.png, account-page.png,
requests-usage.png, requests-errors.png, request-detail.png, error-detail.png."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone

from proxy.models import Account, AccountUsage
from proxy.services.account_policies import account_policy_set
from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.models import OpsErrorLog, UsageRecord
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.fakes.oauth import Identity
from tests.proxy.conftest import make_oauth_account
from tests.proxy.factories import make_account

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]
PASSWORD = "correct horse battery staple"
SECRET = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsZWFrIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
RECORDS = 45


def _quota(now, five_hour: float, weekly: float) -> dict:
    return {
        "plan_type": "plus",
        "snapshots": [
            {
                "source": "core",
                "primary": {
                    "used_percent": five_hour,
                    "window_minutes": 300,
                    "reset_at": int((now + timedelta(hours=2)).timestamp()),
                    "limit_reached": five_hour >= 100,
                },
                "secondary": {
                    "used_percent": weekly,
                    "window_minutes": 10080,
                    "reset_at": int((now + timedelta(days=4)).timestamp()),
                },
            }
        ],
    }


@pytest.fixture
def seeded(oauth, upstream):
    now = timezone.now()
    runtime_settings_ensure(now=now)
    fingerprint_ensure_current(now=now)
    admin_user_create_default(password=PASSWORD, now=now)
    valid = {"access_token_expires_at": now + timedelta(days=3), "quota_fetched_at": now}
    main = make_account(
        label="main",
        email="main@example.com",
        plan_type="plus",
        access_token="tok-main",
        quota_json=_quota(now, 42, 10),
        **valid,
    )
    account_policy_set(account=main, daily_burn_cap_tokens=50_000, now=now)
    AccountUsage.objects.create(
        account=main,
        input_tokens=9_000,
        output_tokens=1_000,
        last_used_at=now - timedelta(minutes=4),
    )
    backup = make_account(
        email="backup@example.com", plan_type="team", quota_json=_quota(now, 87, 55), **valid
    )
    tired = make_account(
        email="tired@example.com",
        plan_type="plus",
        status="quota_exhausted",
        quota_limit_reached=True,
        quota_cooldown_until=now + timedelta(hours=2),
        quota_json=_quota(now, 100, 71),
        **valid,
    )
    make_account(email="rest@example.com", status="disabled")
    carol = make_oauth_account(
        oauth, Identity("org-carol", "user-carol", "pro", "carol@example.com")
    )
    keys = [client_api_key_create(name=name, now=now) for name in ("laptop", "ci", "bot")]
    accounts = [main, backup, tired, carol]
    for index in range(RECORDS):
        usage_record_create(
            created_at=now - timedelta(hours=16 * index + 1),
            account_id=accounts[index % 4].pk,
            client_api_key_id=keys[index % 3].pk,
            model="gpt-5.4" if index % 2 else "gpt-5.4-mini",
            route="/v1/chat/completions" if index % 5 == 0 else "/v1/responses",
            message="v1 responses completed",
            request_id=f"req_seeded_{index}",
            input_tokens=2_000 + index,
            output_tokens=300,
            cached_tokens=500,
            first_token_ms=200,
            latency_ms=1_500,
            transport="http_sse",
        )
    for index in range(9):
        ops_error_log_create(
            created_at=now - timedelta(hours=16 * index + 1, seconds=5),
            message="v1 responses upstream request failed",
            request_id=f"req_seeded_{index}",
            account_id=backup.pk,
            client_api_key_id=keys[index % 3].pk,
            model="gpt-5.4",
            route="/v1/responses",
            status_code=503 if index % 3 else 429,
            upstream_status_code=503 if index % 3 else 429,
            failure_class="upstream_unavailable" if index % 3 else "rate_limited",
            metadata={
                "error": "upstream overloaded",
                "upstreamBody": f'{{"detail": "overloaded", "token": "{SECRET}"}}',
                "upstreamBodyTruncated": False,
                "attempts": [{"index": 0, "accountId": backup.pk}],
            },
        )
    upstream.usage["tok-main"] = {
        "plan_type": "plus",
        "rate_limit": {
            "allowed": True,
            "limit_reached": False,
            "primary_window": {
                "used_percent": 35,
                "limit_window_seconds": 18000,
                "reset_at": int((now + timedelta(hours=3)).timestamp()),
            },
            "secondary_window": {
                "used_percent": 12,
                "limit_window_seconds": 604800,
                "reset_at": int((now + timedelta(days=4)).timestamp()),
            },
        },
    }
    return {"main": main, "backup": backup, "carol": carol, "keys": keys}


def _log_in(browser, server, next_path: str) -> None:
    browser.open(f"{server.url}/admin/login/?next={next_path}")
    browser.driver.find_element("name", "username").send_keys("admin")
    browser.driver.find_element("name", "password").send_keys(PASSWORD)
    browser.driver.find_element("css selector", "input[type=submit]").click()
    browser.wait_until(
        lambda: browser.script("return location.pathname") == next_path,
        what=f"{next_path} after log-in",
    )


def _layout(browser) -> dict:
    """How much the list's table is wider than its box, and the headers off screen."""
    return browser.script(
        """
        const results = document.querySelector('#changelist .results');
        const heads = Array.from(document.querySelectorAll('#result_list thead th'));
        return {
          overflow: results.scrollWidth - results.clientWidth,
          offscreen: heads.filter(th => th.getBoundingClientRect().right > innerWidth)
                          .map(th => th.textContent.trim()),
          heads: heads.map(th => th.textContent.trim()).filter(Boolean),
        };
        """
    )


def _rows(browser) -> int:
    return browser.script("return document.querySelectorAll('#result_list tbody tr').length")


def _go(browser, click_script: str, *arguments, until: str) -> None:
    """Click (in the page) and wait for the next page, recognised by ``until`` (JS)."""
    browser.script("window.__left = true;")
    browser.script(click_script, *arguments)
    browser.wait_until(lambda: browser.script(f"return !window.__left && ({until})"), what=until)


def _account_rows(browser) -> dict[str, dict]:
    return browser.script(
        """
        const rows = {};
        for (const tr of document.querySelectorAll('#result_list tbody tr')) {
          const name = tr.querySelector('.glance-name').textContent;
          rows[name] = {
            used: Array.from(tr.querySelectorAll('.glance-quota')).map(d => Number(d.dataset.used)),
            status: tr.querySelector('.glance-status').textContent,
            verdict: tr.querySelector('.glance-verdict').textContent,
            actions: Array.from(tr.querySelectorAll('button[data-action]'))
                          .map(b => b.dataset.action),
            today: tr.querySelector('.glance-today').textContent,
          };
        }
        return rows;
        """
    )


def _click_row_action(browser, name: str, action: str, message: str) -> None:
    _go(
        browser,
        """
        for (const tr of document.querySelectorAll('#result_list tbody tr')) {
          if (tr.querySelector('.glance-name').textContent === arguments[0]) {
            tr.querySelector(`button[data-action="${arguments[1]}"]`).click();
          }
        }
        """,
        name,
        action,
        until=f"document.querySelector('.messagelist')?.textContent.includes({message!r})",
    )


def test_accounts_at_a_glance_and_requests_you_can_follow(browser, https_live_server, seeded):
    # 1366 px wide (the narrow screen the list must be readable on), tall enough that the
    # screenshots show every seeded account.
    browser.driver.set_window_size(1366, 1400)
    _log_in(browser, https_live_server, "/admin/proxy/account/")

    # The list at 1366 px: nothing clipped, every column on screen, the seeded figures drawn.
    layout = _layout(browser)
    assert layout["overflow"] <= 0 and layout["offscreen"] == []
    assert layout["heads"] == [
        "Account",
        "Status · eligibility",
        "5-hour quota",
        "Weekly quota",
        "Tokens today (UTC) / cap",
        "Last used",
        "Actions",
    ]
    rows = _account_rows(browser)
    assert rows["main"]["used"] == [42, 10] and rows["main"]["verdict"].startswith("Eligible")
    assert rows["main"]["today"] == "10,000 / 50,000 tokens"
    assert rows["backup@example.com"]["used"] == [87, 55]
    assert rows["tired@example.com"]["used"] == [100, 71]
    assert rows["tired@example.com"]["verdict"].startswith("Held back: its quota limit")
    assert rows["rest@example.com"]["actions"] == ["read-quota", "enable"]
    browser.screenshot("accounts-glance")

    # The row actions.
    _click_row_action(browser, "main", "read-quota", "The quota of main was read")
    assert _account_rows(browser)["main"]["used"] == [35, 12]
    _click_row_action(browser, "backup@example.com", "disable", "was disabled")
    assert _account_rows(browser)["backup@example.com"]["status"] == "disabled"
    assert Account.objects.get(pk=seeded["backup"].pk).status == "disabled"
    before = seeded["carol"].access_token
    _click_row_action(browser, "carol@example.com", "refresh-token", "were refreshed")
    assert Account.objects.get(pk=seeded["carol"].pk).access_token != before
    browser.screenshot("accounts-actions")
    _go(
        browser,
        "document.querySelector(`a.glance-name[href$='/${arguments[0]}/change/']`).click()",
        quote(seeded["main"].pk),
        until="!!document.querySelector('.glance-window')",
    )
    windows = browser.script(
        "return Array.from(document.querySelectorAll('.glance-window'))"
        ".map(w => w.querySelector('strong').textContent + ' ' + w.querySelector('.glance-quota')"
        ".dataset.used)"
    )
    assert windows == ["5-hour 35", "Weekly 12"]
    browser.screenshot("account-page")

    # The usage records: names, not ids; the filters narrow the rows.
    laptop = seeded["keys"][0]
    browser.open(f"{https_live_server.url}/admin/telemetry/usagerecord/")
    assert _rows(browser) == RECORDS
    assert _layout(browser)["overflow"] <= 0
    cells = browser.script(
        "return Array.from(document.querySelectorAll('#result_list tbody tr:first-child td'))"
        ".map(td => td.textContent.trim())"
    )
    assert "main" in cells and "laptop" in cells and not any("acct_" in c for c in cells)
    _go(
        browser,
        "document.querySelector(`#changelist-filter a[href='?key=${arguments[0]}']`).click()",
        laptop.pk,
        until="location.search.includes('key=')",
    )
    assert _rows(browser) == 15  # every third record
    _go(
        browser,
        "document.querySelector(`#changelist-filter a[href*='created=7d']`).click()",
        until="location.search.includes('created=7d')",
    )
    in_week = UsageRecord.objects.filter(
        client_api_key_id=laptop.pk, created_at__gte=timezone.now() - timedelta(days=7)
    ).count()
    assert _rows(browser) == in_week < 15
    _go(
        browser,
        "document.querySelector(`#changelist-filter a[href*='model=gpt-5.4-mini']`).click()",
        until="location.search.includes('model=gpt-5.4-mini')",
    )
    assert 0 < _rows(browser) < in_week
    browser.screenshot("requests-usage")

    # A request's page links to its failed attempt; the error's page shows the upstream's answer.
    record = UsageRecord.objects.get(request_id="req_seeded_1")
    error = OpsErrorLog.objects.get(request_id="req_seeded_1")
    browser.open(f"{https_live_server.url}/admin/telemetry/usagerecord/{quote(record.pk)}/change/")
    sections = browser.script(
        "return Array.from(document.querySelectorAll('#fact-detail h2')).map(h => h.textContent)"
    )
    assert sections[:5] == ["Request", "Who", "Model", "Tokens and cost", "Timing"]
    browser.screenshot("request-detail")
    _go(
        browser,
        "document.querySelector(`a[href$='/opserrorlog/${arguments[0]}/change/']`).click()",
        quote(error.pk),
        until="!!document.getElementById('upstream-body')",
    )
    body = browser.script("return document.getElementById('upstream-body').textContent")
    assert body == '{"detail": "overloaded", "token": "[masked]"}'
    assert SECRET not in browser.script("return document.body.innerHTML")
    browser.screenshot("error-detail")
    _go(
        browser,
        "document.querySelector(`a[href$='/usagerecord/${arguments[0]}/change/']`).click()",
        quote(record.pk),
        until="location.pathname.includes('/usagerecord/')",
    )

    # The ops errors: filtered by status from the sidebar.
    browser.open(f"{https_live_server.url}/admin/telemetry/opserrorlog/")
    assert _rows(browser) == 9
    assert _layout(browser)["overflow"] <= 0
    _go(
        browser,
        "document.querySelector(`#changelist-filter a[href='?status_class=429']`).click()",
        until="location.search.includes('status_class=429')",
    )
    assert _rows(browser) == 3
    browser.screenshot("requests-errors")
    errors = [
        entry["message"]
        for entry in browser.console()
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert errors == []
