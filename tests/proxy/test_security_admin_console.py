"""Findings 4 and 5: the password rule holds on the admin's password-change page, and no list
lookup reads a secret column one character at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from proxy.models import AccountUsage, AdminUser
from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from tests.proxy.factories import make_account, make_cookie

PASSWORD = "correct horse battery staple"
ACCESS_TOKEN = "eyJhbGciOiJSUzI1NiJ9.secret-access-token"
REFRESH_TOKEN = "rt_secret-refresh-token-value"
COOKIE_VALUE = "cf_clearance_secret_cookie_value"


@pytest.fixture
def admin_client(db, settings) -> Client:
    admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))
    client = Client()
    assert (
        client.post(
            "/admin/login/", {"username": settings.CPR_ADMIN_USERNAME, "password": PASSWORD}
        ).status_code
        == 302
    )
    return client


@pytest.mark.parametrize("password", ["x", "password", "short-pass1"])
def test_the_password_change_page_refuses_a_password_against_the_rule(admin_client, password):
    before = AdminUser.objects.get().password

    response = admin_client.post(
        "/admin/password_change/",
        {"old_password": PASSWORD, "new_password1": password, "new_password2": password},
    )

    assert response.status_code == 200
    errors = response.context["form"].errors["new_password2"]
    assert any("This password is" in error for error in errors)
    assert AdminUser.objects.get().password == before
    assert admin_client.get("/admin/").status_code == 200  # still logged in, nothing changed


def test_the_rule_is_the_configured_django_validator():
    with pytest.raises(ValidationError, match="shorter than 12 characters"):
        validate_password("x")
    with pytest.raises(ValidationError, match="well-known weak value"):
        validate_password("Codex-Proxy-RS")
    assert validate_password("a long enough passphrase") is None


@pytest.fixture
def secrets_in_the_console(db):
    account = make_account(
        access_token=ACCESS_TOKEN,
        refresh_token=REFRESH_TOKEN,
        access_token_expires_at=timezone.now() + timedelta(days=1),
        email="victim@example.com",
    )
    make_cookie(account=account, value=COOKIE_VALUE)
    key = client_api_key_create(name="leaky", now=timezone.now())
    return account, key


@pytest.mark.parametrize(
    ("changelist", "lookup", "value"),
    [
        ("/admin/proxy/account/", "access_token__startswith", ACCESS_TOKEN[:3]),
        ("/admin/proxy/account/", "refresh_token__startswith", REFRESH_TOKEN[:3]),
        ("/admin/proxy/account/", "access_token", ACCESS_TOKEN),
        ("/admin/proxy/account/", "access_token__regex", "^ey"),
        ("/admin/proxy/accountcookie/", "value__startswith", COOKIE_VALUE[:3]),
        ("/admin/proxy/accountcookie/", "account__access_token__startswith", "ey"),
        ("/admin/proxy/accountusage/", "account__refresh_token__startswith", "rt"),
        ("/admin/proxy/clientapikey/", "key__startswith", "sk_"),
        ("/admin/proxy/adminuser/", "password__startswith", "argon2"),
        ("/admin/proxy/runtimesettings/", "admin_api_key_hash__isnull", "False"),
    ],
)
def test_a_lookup_through_a_secret_column_is_refused(
    admin_client, secrets_in_the_console, changelist, lookup, value
):
    account, _ = secrets_in_the_console
    if changelist == "/admin/proxy/accountusage/":
        AccountUsage.objects.create(account=account)

    right = admin_client.get(changelist, {lookup: value})
    wrong = admin_client.get(changelist, {lookup: "zz-no-match"})

    # The same 400 whether the guess is right or wrong: no oracle.
    assert right.status_code == wrong.status_code == 400
    assert account.email.encode() not in right.content
    assert ACCESS_TOKEN.encode() not in right.content


def test_ordinary_filters_still_work(admin_client, secrets_in_the_console):
    response = admin_client.get("/admin/proxy/account/", {"status": "active"})

    assert response.status_code == 200
    assert b"victim@example.com" in response.content
    assert ACCESS_TOKEN.encode() not in response.content  # masked in the list


def test_the_operator_reads_the_log_in_audit_in_the_console(db, settings):
    admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))
    intruder = Client(REMOTE_ADDR="198.51.100.77")
    intruder.post("/admin/login/", {"username": "root", "password": "hunter2 hunter2"})
    operator = Client()
    operator.post("/admin/login/", {"username": settings.CPR_ADMIN_USERNAME, "password": PASSWORD})

    page = operator.get("/admin/proxy/adminloginevent/")

    assert page.status_code == 200
    rows = page.context["cl"].result_list
    assert [(row.outcome, row.reason, row.client_ip) for row in rows] == [
        ("success", None, "127.0.0.1"),
        ("failure", "unknown_username", "198.51.100.77"),
    ]
    assert b"hunter2" not in page.content and b"root" not in page.content
