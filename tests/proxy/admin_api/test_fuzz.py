"""A schema-driven fuzz of the admin API: schemathesis generates requests for every operation
of the OpenAPI document (/api/schema/) and sends them, authenticated (a real admin session
cookie or the admin API key, never a credential schemathesis made up), to the
project's WSGI application on the real PostgreSQL and Redis. No answer may be a 5xx.

Bounded for `make test`: at most FUZZ_EXAMPLES requests per operation. Left out: log-in (each
attempt hashes a password and counts towards the lock-out) and log-out (it would end the
session the rest of the run uses). The OAuth server and the upstream are the local fakes, so a
5xx is a fault of ours, not of an unreachable host."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings

from config.wsgi import application
from proxy import redis_keys
from proxy.services.admin_api_key import admin_api_key_regenerate
from proxy.services.admin_users import admin_user_create_default
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.sessions import admin_session_login
from tests.proxy.admin_api.conftest import COOKIE, PASSWORD

FUZZ_EXAMPLES = int(os.environ.get("ADMIN_API_FUZZ_EXAMPLES", "15"))

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
admin_operations = schema.include(path_regex=r"^/api/admin/").exclude(
    path_regex=r"^/api/admin/(login|logout)$"
)


@pytest.fixture
def credentials(db, redis_client):
    # As Django's test client does: a request must not close the test's connection (its data
    # lives in the test's transaction).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield _logged_in()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)
    # The database rolls back; Redis does not: the OAuth sessions the fuzz started go too.
    started = list(redis_client.scan_iter(redis_keys.oauth_session("*")))
    if started:
        redis_client.delete(*started)


@dataclass(frozen=True)
class Credentials:
    session: str
    api_key: str


def _logged_in() -> Credentials:
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    admin = admin_user_create_default(password=PASSWORD, now=timezone.now())
    token, _ = admin_session_login(user=admin, now=timezone.now())
    return Credentials(session=token, api_key=admin_api_key_regenerate(now=timezone.now()))


def authenticate(case, credentials: Credentials) -> None:
    """Replace whatever credentials schemathesis generated from the security schemes (a random
    cookie or x-api-key would make every request a 401) with real ones: the session cookie
    for half the cases, the admin API key for the other half."""
    headers = {
        name: value
        for name, value in (case.headers or {}).items()
        if name.lower() not in ("x-api-key", "cookie")
    }
    cookies = {name: value for name, value in (case.cookies or {}).items() if name != COOKIE}
    digest = hashlib.sha256(repr((case.method, case.path, case.query, case.body)).encode())
    # The key's own routes end it (regenerate, delete): the later cases would hold a dead key.
    if digest.digest()[0] % 2 and "/admin-api-key" not in case.path:
        headers["x-api-key"] = credentials.api_key
    else:
        cookies[COOKIE] = credentials.session
    case.headers, case.cookies = headers, cookies


@pytest.mark.slow
@admin_operations.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_admin_operation_answers_a_server_error(case, credentials, oauth, upstream):
    authenticate(case, credentials)
    response = case.call()

    described = (
        f"{case.method} {case.formatted_path} {case.query or ''} → {response.status_code}: "
        f"{response.text[:500]}"
    )
    assert response.status_code < 500, described
    # Authenticated: the fuzz reaches the handlers, not the credential check.
    assert response.status_code != 401, described
    if (
        response.status_code != 200
        or "event-stream" in response.headers.get("Content-Type", [""])[0]
    ):
        return
    body = response.json()
    assert set(body) == {"code", "message", "data"}
