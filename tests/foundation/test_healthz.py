"""GET /healthz: 204 when PostgreSQL and Redis answer, 503 naming the failed store otherwise."""

from __future__ import annotations

import pytest
from django.test import override_settings


@pytest.mark.django_db
def test_healthz_is_204_with_empty_body_when_both_stores_answer(client):
    response = client.get("/healthz")

    assert response.status_code == 204
    assert response.content == b""


@pytest.mark.django_db
def test_healthz_needs_no_authentication_and_rejects_other_methods(client):
    assert client.post("/healthz").status_code == 405


def _caches_pointing_at(url: str) -> dict:
    from django.conf import settings

    caches = {"default": {**settings.CACHES["default"], "LOCATION": url}}
    return caches


@pytest.mark.django_db
def test_healthz_is_503_naming_redis_when_redis_is_really_stopped(client, private_redis):
    with override_settings(CACHES=_caches_pointing_at(private_redis.url)):
        assert client.get("/healthz").status_code == 204

        private_redis.stop()
        response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "failed": ["redis"],
        "checks": {"postgresql": "ok", "redis": "unavailable"},
    }
    assert str(private_redis.port) not in response.content.decode()


@pytest.mark.django_db
def test_healthz_is_503_when_redis_is_unreachable(client):
    # A port with nothing listening: the connection is refused.
    from tests.conftest import _free_port

    with override_settings(CACHES=_caches_pointing_at(f"redis://127.0.0.1:{_free_port()}/0")):
        response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["failed"] == ["redis"]
