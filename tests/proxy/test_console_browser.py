"""Issue 38's key and people pages in headless Chromium (Debian's chromium, offline), one
logged-in session over seeded data: a key added on the console's form is enabled and answers
its first ``/v1`` call; the key list carries the seeded spend and the budget bars; the
response-time page draws the seeded days on labelled charts with users by name; the audit
trail names the operator; every page's header shows the console's time zone.

Screenshots (var/screenshots/): ``keys-add.png``, ``keys-list.png``, ``response-times.png``,
``audit-trail.png`` — described in docs/console.md."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from bots.models import AdminAuditEntry, Bot, BotUser, RelayedMessage
from proxy.admin_api.display import console_midnight
from proxy.domain.key_policy import day_start
from proxy.models import ClientApiKey
from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set
from proxy.v1.auth import flush_key_touches
from telemetry.services.ledger import usage_record_create
from tests.proxy.conftest import make_pool_account, post_responses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]
PASSWORD = "correct horse battery staple"
BOT_ID, ANN, BEN = 880001, 5101, 5102
ZONE_TEXT = "Times in Asia/Shanghai (UTC+08:00)"


@pytest.fixture
def seeded(proxy, upstream):
    """An admin, a pool account, a key with a budget and spend today, and the bot's week: Ann
    answered after 10 and 30 minutes three days ago, Ben after 40 minutes yesterday."""
    now = timezone.now()
    admin = admin_user_create_default(password=PASSWORD, now=now)
    make_pool_account("tok-browser-keys")
    team = client_api_key_create(name="team", now=now - timedelta(days=2))
    key_policy_set(
        key=team, values=PolicyValues(daily_budget_usd=Decimal("2")), now=now - timedelta(days=1)
    )
    for _ in range(3):  # $0.40 each (gpt-5.4: 100,000 in, 10,000 out)
        usage_record_create(
            created_at=day_start(now),
            account_id="acct_browser",
            model="gpt-5.4",
            message="v1 responses completed",
            client_api_key_id=team.pk,
            input_tokens=100_000,
            output_tokens=10_000,
        )
    Bot.objects.create(bot_id=BOT_ID, username="hodor_browser_bot", created_at=now)
    BotUser.objects.create(bot_id=BOT_ID, user_id=ANN, first_name="Ann", username="ann_b")
    BotUser.objects.create(bot_id=BOT_ID, user_id=BEN, first_name="Ben", last_name="Brown")
    today = console_midnight(now)
    ledger = [
        (ANN, "in", today - timedelta(days=3) + timedelta(hours=9)),
        (ANN, "out", today - timedelta(days=3) + timedelta(hours=9, minutes=10)),
        (ANN, "in", today - timedelta(days=3) + timedelta(hours=11)),
        (ANN, "out", today - timedelta(days=3) + timedelta(hours=11, minutes=30)),
        (BEN, "in", today - timedelta(days=1) + timedelta(hours=15)),
        (BEN, "out", today - timedelta(days=1) + timedelta(hours=15, minutes=40)),
    ]
    RelayedMessage.objects.bulk_create(
        RelayedMessage(
            bot_id=BOT_ID, user_id=user, thread_id=900 + user, direction=way, created_at=when
        )
        for user, way, when in ledger
    )
    AdminAuditEntry.objects.create(  # as the console wrote it before: the admin row's id
        bot_id=BOT_ID,
        surface="console",
        actor_name=admin.get_username(),
        action="ban",
        target_user_id=ANN,
        outcome="done",
    )
    local_today = timezone.localtime(now).date()
    return {"team": team, "days": [local_today - timedelta(days=n) for n in range(6, -1, -1)]}


def _log_in(browser, server, next_path: str) -> None:
    browser.open(f"{server.url}/admin/login/?next={next_path}")
    browser.driver.find_element("name", "username").send_keys("admin")
    browser.driver.find_element("name", "password").send_keys(PASSWORD)
    browser.driver.find_element("css selector", "input[type=submit]").click()
    browser.wait_until(
        lambda: browser.script("return location.pathname") == next_path,
        what=f"{next_path} after log-in",
    )


def _text(browser, selector: str) -> str:
    return browser.script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent.trim() : null;",
        selector,
    )


def _go(browser, server, path: str) -> None:
    browser.open(f"{server.url}{path}")
    browser.wait_until(lambda: browser.script("return document.readyState") == "complete")
    assert _text(browser, "#console-time-zone") == ZONE_TEXT, path


def test_keys_response_times_and_the_audit_trail_in_a_browser(
    browser, https_live_server, proxy, seeded
):
    browser.driver.set_window_size(1366, 900)
    _log_in(browser, https_live_server, "/admin/proxy/clientapikey/add/")
    assert _text(browser, "#console-time-zone") == ZONE_TEXT

    # The add form: the box starts ticked; the operator only types a name.
    assert browser.script("return document.getElementById('id_enabled').checked") is True
    browser.driver.find_element("id", "id_name").send_keys("laptop")
    browser.screenshot("keys-add")
    browser.driver.find_element("css selector", "input[name=_save]").click()
    browser.wait_until(
        lambda: browser.script("return location.pathname") == "/admin/proxy/clientapikey/",
        what="the key list after saving",
    )
    browser.driver.find_element("link text", "Copy it and its client configuration").click()
    browser.wait_until(lambda: _text(browser, "#key-value"), what="the key on its use page")
    created = ClientApiKey.objects.get(name="laptop")
    assert _text(browser, "#key-value") == created.key and created.enabled

    # The key the browser shows answers its first /v1 call.
    answer = post_responses(proxy, created, {"model": "gpt-5.4", "input": "hi", "stream": False})
    assert answer.status_code == 200, answer.text
    proxy.drain()  # its usage row written
    asyncio.run_coroutine_threadsafe(flush_key_touches(), proxy.loop).result(30)  # last used

    # The list: the seeded spend and the budget bar, read back from the page.
    _go(browser, https_live_server, "/admin/proxy/clientapikey/")
    team_row = browser.script(
        "const link = Array.from(document.querySelectorAll('#result_list th .key-name'))"
        "  .find(name => name.textContent === 'team');"
        "const row = link.closest('tr');"
        "const meter = row.querySelector('.key-bar meter');"
        "return {today: row.querySelector('.field-today .key-period').dataset,"
        "        meter: [meter.value, meter.max],"
        "        bar: row.querySelector('.key-bar-value').textContent};"
    )
    assert team_row["today"] == {"requests": "3", "cost": "1.2"}
    laptop_row = browser.script(
        "const name = Array.from(document.querySelectorAll('#result_list th .key-name'))"
        "  .find(name => name.textContent === 'laptop');"
        "const row = name.closest('tr');"
        "return [row.querySelector('.field-today .key-period').dataset.requests,"
        "        row.querySelector('.field-last_used').textContent.trim()];"
    )
    assert laptop_row == ["1", "just now"]  # the first call, on the list
    assert team_row["meter"] == [1.2, 2] and team_row["bar"] == "$1.20 of $2.00"
    # Readable at 1366 px: the table fits its box beside the filter (no sideways scrolling).
    assert browser.script(
        "const box = document.querySelector('#changelist .results');"
        "return box.scrollWidth <= box.clientWidth;"
    )
    browser.screenshot("keys-list")

    # Response times: the seeded week on the chart's days, users by name.
    _go(browser, https_live_server, "/admin/bots/relayedmessage/response-times/?days=7")
    medians = browser.script(
        "return Array.from(document.querySelectorAll("
        "  '#response-chart rect.bar[data-series=median]'))"
        "  .map(r => [r.dataset.label, r.dataset.value]);"
    )
    labels = [day.strftime("%m-%d") for day in seeded["days"]]
    assert medians == [
        [label, {3: "20.0", 1: "40.0"}.get(6 - index, "")] for index, label in enumerate(labels)
    ]
    x_labels = browser.script(
        "return Array.from(document.querySelectorAll('#response-chart text.x-label'))"
        "  .map(t => t.textContent);"
    )
    assert x_labels == labels
    people = browser.script(
        "return Array.from(document.querySelectorAll('#response-conversations tbody tr'))"
        "  .map(r => r.cells[0].textContent.trim());"
    )
    assert sorted(people) == sorted(
        [f"Ann (@ann_b) {ANN} · messages", f"Ben Brown {BEN} · messages"]
    )
    browser.screenshot("response-times")

    # The audit trail: the operator by name, the user by name.
    _go(browser, https_live_server, "/admin/bots/adminauditentry/")
    assert _text(browser, "td.field-actor") == "admin"
    assert _text(browser, "td.field-user a") == "Ann (@ann_b)"
    browser.screenshot("audit-trail")
    errors = [
        entry["message"]
        for entry in browser.console()
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert errors == []
