"""A schema-driven fuzz of the admin API: schemathesis generates requests for every operation
of the OpenAPI document (/api/schema/) and sends them, with a real admin session, to the
project's WSGI application on the real PostgreSQL and Redis. No answer may be a 5xx.

Bounded for `make test`: at most FUZZ_EXAMPLES requests per operation. Left out: log-in (each
attempt hashes a password and counts towards the lock-out) and log-out (it would end the
session the rest of the run uses)."""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings

from config.wsgi import application
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
def session_header(db):
    # As Django's test client does: a request must not close the test's connection (its data
    # lives in the test's transaction).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield _logged_in()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _logged_in() -> dict[str, str]:
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    admin = admin_user_create_default(password=PASSWORD, now=timezone.now())
    token, _ = admin_session_login(user=admin, now=timezone.now())
    return {"Cookie": f"{COOKIE}={token}"}


@admin_operations.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_admin_operation_answers_a_server_error(case, session_header):
    response = case.call(headers=session_header)

    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} {case.query or ''} → {response.status_code}: "
        f"{response.text[:500]}"
    )
    if (
        response.status_code != 200
        or "event-stream" in response.headers.get("Content-Type", [""])[0]
    ):
        return
    body = response.json()
    assert set(body) == {"code", "message", "data"}
