"""The runtime settings page in headless Chromium (issue 38, "settings without JSON"): alias rows
added with the page's own "Add another alias" (Django's inlines.js), one deleted, a strategy
picked, saved; then an admin API key generated and shown once. Screenshots:
var/screenshots/settings.png and var/screenshots/settings-api-key.png."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from proxy.models import RuntimeSettings
from proxy.services.admin_users import admin_user_create_default
from proxy.services.runtime_settings import runtime_settings_ensure, runtime_settings_update

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]
PASSWORD = "correct horse battery staple"
PAGE = "/admin/proxy/runtimesettings/1/change/"


@pytest.fixture
def operator_settings():
    now = timezone.now()
    runtime_settings_ensure(now=now)
    runtime_settings_update(changes={"model_aliases_json": {"fast": "gpt-5.4-mini"}}, now=now)
    admin_user_create_default(password=PASSWORD, now=now)


def _log_in(browser, server, next_path: str) -> None:
    browser.open(f"{server.url}/admin/login/?next={next_path}")
    browser.driver.find_element("name", "username").send_keys("admin")
    browser.driver.find_element("name", "password").send_keys(PASSWORD)
    browser.driver.find_element("css selector", "input[type=submit]").click()
    browser.wait_until(
        lambda: browser.script("return location.pathname") == next_path,
        what=f"{next_path} after log-in",
    )


def _type(browser, name: str, text: str) -> None:
    field = browser.driver.find_element("name", name)
    field.clear()
    field.send_keys(text)


def _rows_shown(browser) -> int:
    return browser.script(
        "return document.querySelectorAll('#model-aliases tbody tr.form-row:not(.empty-form)')"
        ".length"
    )


def test_aliases_are_edited_as_rows_and_the_api_key_is_shown_once(
    browser, https_live_server, operator_settings
):
    browser.driver.set_window_size(1366, 2300)  # the whole page in the screenshot
    _log_in(browser, https_live_server, PAGE)
    assert _rows_shown(browser) == 4  # the stored alias and three blank rows

    add = browser.driver.find_element("css selector", "#alias-group tr.add-row a")
    assert add.text == "Add another alias"
    add.click()
    browser.wait_until(lambda: _rows_shown(browser) == 5, what="a fifth alias row")
    _type(browser, "alias-1-alias", "big")
    _type(browser, "alias-1-target", "gpt-5.5")
    _type(browser, "alias-4-alias", "review")
    _type(browser, "alias-4-target", "codex-auto-review")
    browser.driver.find_element("name", "alias-0-DELETE").click()
    browser.driver.find_element(
        "css selector", 'input[name="rotation_strategy"][value="round_robin"]'
    ).click()
    browser.driver.find_element("name", "_continue").click()
    browser.wait_until(
        lambda: browser.script("return !!document.querySelector('ul.messagelist li.success')"),
        what="the page saved",
    )

    stored = RuntimeSettings.objects.get()
    assert stored.model_aliases_json == {"big": "gpt-5.5", "review": "codex-auto-review"}
    assert stored.rotation_strategy == "round_robin"
    shown = browser.script(
        "return Array.from(document.querySelectorAll('#model-aliases tbody tr.form-row"
        ":not(.empty-form)')).map(r => [r.querySelector('.field-alias input').value,"
        " r.querySelector('.field-target input').value])"
    )
    assert shown == [
        ["big", "gpt-5.5"],
        ["review", "codex-auto-review"],
        ["", ""],
        ["", ""],
        ["", ""],
    ]
    browser.screenshot("settings")

    browser.driver.find_element("id", "admin-api-key-regenerate").click()
    browser.wait_until(lambda: browser.script("return !!document.getElementById('confirm')"))
    browser.driver.find_element("id", "confirm").click()
    browser.wait_until(
        lambda: browser.script("return !!document.getElementById('new-admin-api-key')"),
        what="the new key",
    )
    key = browser.script("return document.getElementById('new-admin-api-key').textContent")
    browser.screenshot("settings-api-key")

    assert key.startswith("admin-") and len(key) == 70
    assert Client().get("/api/admin/settings", headers={"x-api-key": key}).status_code == 200
    browser.open(f"{https_live_server.url}{PAGE}")
    state = browser.script("return document.getElementById('admin-api-key-state').textContent")
    assert state.startswith("Set: admin-••••••••, SHA-256 beginning") and key not in state
    assert key not in browser.script("return document.documentElement.outerHTML")
    errors = [
        entry["message"]
        for entry in browser.console()
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert errors == []
