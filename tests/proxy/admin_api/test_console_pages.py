"""The console's pages (issue 18): the dashboard inside the Django admin, the account import
page, enable / disable, the connection test page and a key's "use" page."""

from __future__ import annotations

import json

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from proxy.models import Account
from proxy.services.client_api_keys import client_api_key_create
from tests.fakes.oauth import Identity, access_token_for
from tests.proxy.admin_api.conftest import PASSWORD
from tests.proxy.factories import make_account


def _operator(admin) -> Client:
    client = Client()
    assert client.login(username="admin", password=PASSWORD)
    return client


def test_the_dashboard_page_loads_its_vendored_files_only(admin):
    operator = _operator(admin)

    page = operator.get("/admin/dashboard/")

    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-summary-url="/api/admin/dashboard/summary"' in html
    assert "/static/proxy/vendor/chart.umd.min.js" in html
    assert "/static/proxy/dashboard.js" in html
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert "http" not in html.split("<body")[0].replace("http-equiv", "")
    index = operator.get("/admin/").content.decode()
    assert 'href="/admin/dashboard/"' in index


def test_the_dashboard_needs_the_admin_log_in(db):
    page = Client().get("/admin/dashboard/")

    assert page.status_code == 302 and page["Location"].startswith("/admin/login/")


def test_importing_an_export_file_from_the_accounts_list(admin):
    operator = _operator(admin)
    token = access_token_for(Identity("org-f", "user-f"), expires_in=3600)
    upload = SimpleUploadedFile(
        "cpa.json", json.dumps([{"type": "codex", "access_token": token}]).encode()
    )

    listing = operator.get("/admin/proxy/account/").content.decode()
    page = operator.post("/admin/proxy/account/import/", {"file": upload})

    assert 'href="/admin/proxy/account/import/"' in listing
    assert page.status_code == 200
    assert "cliproxyapi: 1 imported, 0 updated, 0 skipped, 0 invalid." in page.content.decode()
    assert Account.objects.get().access_token == token
    refused = operator.post("/admin/proxy/account/import/", {"text": '{"nope": 1}'})
    assert "no importable accounts" in refused.content.decode()


def test_enable_and_disable_from_the_list(admin):
    operator = _operator(admin)
    account = make_account(status="active")

    operator.post(
        "/admin/proxy/account/",
        {"action": "disable_accounts", "_selected_action": [account.pk]},
    )
    account.refresh_from_db()
    assert account.status == "disabled"
    operator.post(
        "/admin/proxy/account/",
        {"action": "enable_accounts", "_selected_action": [account.pk]},
    )
    account.refresh_from_db()
    assert account.status == "active"


def test_the_connection_test_page_streams_the_admin_api(admin):
    operator = _operator(admin)
    account = make_account()

    listing = operator.get("/admin/proxy/account/").content.decode()
    page = operator.get(f"/admin/proxy/account/{account.pk}/test/").content.decode()

    assert f'href="/admin/proxy/account/{account.pk}/test/"' in listing
    assert 'data-test-url="/api/admin/accounts/test"' in page
    assert f'data-account-id="{account.pk}"' in page


def test_a_keys_use_page_has_the_key_the_config_and_the_cc_switch_link(admin):
    operator = _operator(admin)
    key = client_api_key_create(name="desk", now=timezone.now())

    listing = operator.get("/admin/proxy/clientapikey/").content.decode()
    page = operator.get(f"/admin/proxy/clientapikey/{key.pk}/use/").content.decode()

    assert f'href="/admin/proxy/clientapikey/{key.pk}/use/"' in listing
    assert key.key not in listing  # the list keeps showing the prefix only
    assert f'<code id="key-value">{key.key}</code>' in page
    assert "base_url = &quot;http://testserver/v1&quot;" in page
    assert "ccswitch://v1/import?" in page


def test_the_console_import_takes_a_file_as_large_as_the_api_and_explains_a_larger_one(
    transactional_db, asgi_server
):
    import re

    import requests
    from django.conf import settings

    from proxy.services.admin_users import admin_user_create_default
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    admin_user_create_default(password=PASSWORD, now=timezone.now())
    login = Client()
    assert login.login(username="admin", password=PASSWORD)
    session = requests.Session()
    session.cookies.set(
        settings.SESSION_COOKIE_NAME, login.cookies[settings.SESSION_COOKIE_NAME].value
    )
    page_url = f"{asgi_server.url}/admin/proxy/account/import/"

    def post(body: bytes) -> requests.Response:
        page = session.get(page_url, timeout=30)
        assert page.status_code == 200, page.text[:300]
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        return session.post(
            page_url,
            data={"csrfmiddlewaretoken": csrf},
            files={"file": ("export.json", body, "application/json")},
            headers={"Referer": page_url},
            timeout=120,
        )

    token = access_token_for(Identity("org-big", "user-big"), expires_in=3600)
    padding = [{"type": "claude", "access_token": "x" * 1000} for _ in range(4000)]
    large = json.dumps([{"type": "codex", "access_token": token}, *padding]).encode()
    assert 2 * 1024 * 1024 < len(large) < 16 * 1024 * 1024

    imported = post(large)

    assert imported.status_code == 200, imported.text[:300]
    assert "cliproxyapi: 1 imported, 0 updated, 4000 skipped, 0 invalid." in imported.text
    assert Account.objects.get().access_token == token

    too_large = post(b" " * (16 * 1024 * 1024 + 1))

    assert too_large.status_code in (200, 413)
    assert "16 MiB" in too_large.text
    assert Account.objects.count() == 1

    far_too_large = post(b" " * (17 * 1024 * 1024))

    assert far_too_large.status_code == 413
    assert "at most 16 MiB" in far_too_large.text


def test_a_nul_in_a_console_address_is_a_400(admin):
    operator = _operator(admin)

    for path in (
        "/admin/proxy/account/a%00b/change/",
        "/admin/proxy/clientapikey/a%00b/change/",
        "/admin/proxy/account/?q=a%00b",
        "/admin/proxy/account/a%00b/test/",
    ):
        response = operator.get(path)
        assert response.status_code == 400, path
        assert b"NUL" in response.content
