"""Findings 6 and 10 on the admin API (which landed after the review): JSON nested too deep is
a malformed body (400 / 40000), never a 500 with a traceback in the log, on the anonymous
log-in as on every other route; a body over its cap is refused in the envelope before it is
read; and the account import's larger cap is no door for anonymous uploads — its credentials
are checked from the headers before a byte of the body is read."""

from __future__ import annotations

import http.client
import json
import logging

import pytest
from django.utils import timezone

from proxy.models import Account, ClientApiKey
from proxy.sessions import admin_session_login
from tests.proxy.admin_api.conftest import AdminClient, error_of

DEEP = b"[" * 100_000 + b"]" * 100_000
FIFTEEN_MIB = 15 * 1024 * 1024
COOKIE = "cpr_admin_session"


def _raw_post(port: int, path: str, length: int, *, body_part: bytes = b"", **headers: str):
    """POST ``path`` declaring ``length`` body bytes but sending only ``body_part``; returns
    (status, headers, parsed JSON body). The rest of the body is never sent: a server that
    waited for it would time the client out."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("POST", path)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(length))
        for name, value in headers.items():
            connection.putheader(name.replace("_", "-"), value)
        connection.endheaders(body_part)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        connection.close()


def test_an_anonymous_log_in_nested_too_deep_is_malformed_json(admin, caplog):
    caplog.set_level(logging.WARNING)

    response = AdminClient().post("/api/admin/login", data=DEEP, content_type="application/json")

    assert error_of(response, 400, 40000) == "Malformed JSON body"
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/admin/keys", b'{"name": ' + DEEP + b"}"),
        ("/api/admin/settings", b'{"rotationStrategy": ' + DEEP + b"}"),
        ("/api/admin/accounts/import", DEEP),
        ("/api/admin/accounts/delete", b'{"ids": ' + DEEP + b"}"),
    ],
)
def test_an_admin_body_nested_too_deep_is_malformed_json(api, caplog, path, body):
    caplog.set_level(logging.WARNING)

    response = api.post(path, data=body, content_type="application/json")

    assert error_of(response, 400, 40000) == "Malformed JSON body"
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []
    assert ClientApiKey.objects.count() == 0
    assert Account.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_anonymous_15_mib_import_is_answered_401_before_its_body_is_read(asgi_server):
    status, headers, body = _raw_post(
        asgi_server.port, "/api/admin/accounts/import", FIFTEEN_MIB, body_part=b'[{"token": "'
    )

    assert status == 401
    assert body == {"code": 40101, "message": "Admin session required", "data": None}
    assert headers["cache-control"] == "no-store"
    # A made-up session cookie or a wrong admin API key gets no further.
    status, _, body = _raw_post(
        asgi_server.port,
        "/api/admin/accounts/import",
        FIFTEEN_MIB,
        Cookie=f"{COOKIE}=sess_{'A' * 43}",
    )
    assert (status, body["code"]) == (401, 40101)
    status, _, body = _raw_post(
        asgi_server.port,
        "/api/admin/accounts/import",
        FIFTEEN_MIB,
        x_api_key="admin-" + "0" * 64,
    )
    assert (status, body) == (
        401,
        {"code": 40103, "message": "Invalid admin API key", "data": None},
    )
    assert Account.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_admin_body_over_its_cap_is_413_in_the_envelope_before_it_is_read(asgi_server, admin):
    token, _ = admin_session_login(user=admin, now=timezone.now())

    login = _raw_post(asgi_server.port, "/api/admin/login", 50 * 1024 * 1024)
    keys = _raw_post(
        asgi_server.port, "/api/admin/keys", 2 * 1024 * 1024, Cookie=f"{COOKIE}={token}"
    )
    too_big_import = _raw_post(
        asgi_server.port,
        "/api/admin/accounts/import",
        17 * 1024 * 1024,
        Cookie=f"{COOKIE}={token}",
    )

    assert login[0] == keys[0] == 413
    assert (
        login[2]
        == keys[2]
        == {
            "code": 41301,
            "message": "The request body is larger than 1048576 bytes",
            "data": None,
        }
    )
    assert login[1]["cache-control"] == "no-store"
    assert too_big_import[0] == 413
    assert too_big_import[2]["message"] == "The request body is larger than 16777216 bytes"
    assert ClientApiKey.objects.count() == 0


def test_a_foreign_host_header_is_refused_in_the_envelope(api, admin):
    """Finding 9 on the admin API: Django's Host check holds there (400), and says so in the
    envelope rather than as an HTML page."""
    read = api.get("/api/admin/settings", HTTP_HOST="evil.example")
    login = AdminClient().post(
        "/api/admin/login",
        data=json.dumps({"password": "correct horse battery staple"}),
        content_type="application/json",
        HTTP_HOST="evil.example",
    )

    assert error_of(read, 400, 40001) == "Invalid Host header"
    assert error_of(login, 400, 40001) == "Invalid Host header"
    assert COOKIE not in login.cookies
    assert api.get("/admin/", HTTP_HOST="evil.example").status_code == 400  # Django's own page
