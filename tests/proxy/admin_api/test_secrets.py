"""Secrets never leave through the admin API's lists or the log (seed 004 §2.6): upstream
tokens, cookie values, the admin API key, the session token and the password. Client keys are
listed in full, for the authenticated admin only (the seed's one exception besides the
confirmed export)."""

from __future__ import annotations

import logging

from django.utils import timezone

from proxy.services.client_api_keys import client_api_key_create
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.fakes.oauth import Identity, access_token_for
from tests.proxy.admin_api.conftest import COOKIE, PASSWORD, AdminClient, data_of
from tests.proxy.factories import make_account, make_cookie

LIST_ROUTES = (
    "/api/admin/accounts",
    "/api/admin/dashboard/summary",
    "/api/admin/dashboard/trend",
    "/api/admin/usage/records",
    "/api/admin/usage/records/summary",
    "/api/admin/usage/records/insights/models",
    "/api/admin/usage/records/insights/endpoints",
    "/api/admin/usage/records/insights/token-trend",
    "/api/admin/ops/errors",
    "/api/admin/settings",
    "/api/admin/settings/admin-api-key",
)


def test_no_list_and_no_log_line_carries_a_secret(admin, caplog, oauth):
    caplog.set_level(logging.DEBUG)
    client = AdminClient()
    login = client.post_json("/api/admin/login", {"password": PASSWORD})
    session_token = login.cookies[COOKIE].value
    access = access_token_for(Identity("org-s", "user-s"), expires_in=3600)
    account = data_of(
        client.post_json("/api/admin/accounts", {"token": access, "refreshToken": "rt-secret-1"})
    )
    cookie = make_cookie(account=make_account(access_token="at-secret-2", refresh_token="rt-2"))
    api_key = data_of(client.post_json("/api/admin/settings/admin-api-key/regenerate"))["key"]
    client_key = client_api_key_create(name="k", now=timezone.now())
    now = timezone.now()
    usage_record_create(
        created_at=now, account_id=account["id"], model="gpt-5.4", message="v1 responses completed"
    )
    ops_error_log_create(created_at=now, message="v1 responses dispatch failed")
    imported = client.post_json(
        "/api/admin/accounts/import",
        [{"token": access_for_import(), "refreshToken": "rt-secret-3", "label": "i"}],
    )
    assert data_of(imported)["imported"] == 1
    exported = client.get(
        f"/api/admin/accounts/export?ids={account['id']}&confirm=export_sensitive_accounts"
    )
    assert access in exported.content.decode()  # the one place tokens are shown

    secrets = [
        access,
        "rt-secret-1",
        "at-secret-2",
        "rt-secret-3",
        cookie.value,
        api_key,
        session_token,
        PASSWORD,
    ]
    for route in LIST_ROUTES:
        text = client.get(route).content.decode()
        for secret in secrets:
            assert secret not in text, (route, secret[:8])
    keys = client.get("/api/admin/keys").content.decode()
    assert client_key.key in keys
    for secret in secrets:
        assert secret not in keys
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in [*secrets, client_key.key]:
        assert secret not in logged, secret[:8]
    assert "exported with their tokens" in logged


def access_for_import() -> str:
    return access_token_for(Identity("org-i", "user-i"), expires_in=3600)


def test_no_list_parameter_reads_a_secret_column(api):
    """Finding 5 on the admin API: no query parameter reaches a token or cookie column, so a
    right guess and a wrong one get the same answer (no one-character-at-a-time oracle)."""
    account = make_account(
        access_token="at-oracle-0123456789", refresh_token="rt-oracle-9876543210", label="probe"
    )
    make_cookie(account=account, value="cookie-oracle-value")

    def listed(**parameters) -> list[str]:
        items = data_of(api.get("/api/admin/accounts", parameters))["items"]
        return [item["id"] for item in items]

    everything = listed()
    assert everything == [account.id]
    for lookup, right, wrong in (
        ("access_token__startswith", "at-o", "zz"),
        ("access_token", "at-oracle-0123456789", "zz"),
        ("refresh_token__startswith", "rt-o", "zz"),
        ("cookies__value__startswith", "cookie-o", "zz"),
    ):
        assert listed(**{lookup: right}) == listed(**{lookup: wrong}) == everything, lookup
    # The search box looks at ids, e-mail, label and ChatGPT ids, never at the tokens.
    for fragment in ("at-oracle", "rt-oracle", "cookie-oracle"):
        assert listed(search=fragment) == []
    assert listed(search="probe") == [account.id]
