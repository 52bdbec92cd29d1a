"""Fixtures of the admin API tests: an admin, a client logged in through the shared session
store, and one holding the admin API key."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from proxy.services.admin_api_key import admin_api_key_regenerate
from proxy.services.admin_users import admin_user_create_default
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.sessions import admin_session_login

PASSWORD = "correct horse battery staple"
COOKIE = "cpr_admin_session"


@pytest.fixture
def admin(db):
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    return admin_user_create_default(password=PASSWORD, now=timezone.now())


class AdminClient(Client):
    """A test client whose JSON posts are one call: ``post_json(path, body)``."""

    def post_json(self, path: str, body=None, **extra):
        import json

        return self.post(
            path,
            data=json.dumps(body if body is not None else {}),
            content_type="application/json",
            **extra,
        )


@pytest.fixture
def api(admin) -> AdminClient:
    """Logged in: a live session of the shared store in the cpr_admin_session cookie."""
    client = AdminClient()
    token, _ = admin_session_login(user=admin, now=timezone.now())
    client.cookies[COOKIE] = token
    return client


@pytest.fixture
def anonymous(db) -> AdminClient:
    runtime_settings_ensure(now=timezone.now())
    return AdminClient()


@pytest.fixture
def key_api(admin) -> AdminClient:
    """Holding the admin API key (x-api-key), no cookie."""
    key = admin_api_key_regenerate(now=timezone.now())
    return AdminClient(headers={"x-api-key": key})


def data_of(response) -> object:
    """The envelope's data of a 200 answer (fails with the body otherwise)."""
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["code"] == 200 and body["message"] == "OK", body
    assert response["Cache-Control"] == "no-store"
    return body["data"]


def error_of(response, status: int, code: int) -> str:
    """The message of an error answer with ``status`` and body ``code``."""
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and body["data"] is None, body
    assert response["Cache-Control"] == "no-store"
    return body["message"]
