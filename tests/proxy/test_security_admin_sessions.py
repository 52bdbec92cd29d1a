"""Findings 1, 2 (sessions), 11: admin sessions live under the SHA-256 of their token, end at
log-out, on a password change and when idle; a pickle planted in Redis runs nothing.

Each test performs the attack the review demonstrated and shows it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from django.utils import timezone
from kombu.exceptions import ContentDisallowed
from kombu.serialization import dumps as kombu_dumps
from kombu.serialization import loads as kombu_loads

from proxy.models import AdminUser
from proxy.services.admin_users import admin_user_create_default
from proxy.sessions import admin_session_login, admin_session_user

PASSWORD = "correct horse battery staple"
NEW_PASSWORD = "a brand new long passphrase"
COOKIE = "cpr_admin_session"


def _session_key(settings, token: str) -> str:
    return f"{settings.REDIS_KEY_PREFIX}admin:session:{hashlib.sha256(token.encode()).hexdigest()}"


def _log_in(settings, password: str = PASSWORD) -> Client:
    client = Client()
    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": settings.CPR_ADMIN_USERNAME, "password": password},
    )
    assert response.status_code == 302, response.content
    return client


def _everything_stored(redis_client, prefix: str) -> list[bytes]:
    """Every key of this run and every value held under it (strings, sets, hashes, lists)."""
    found: list[bytes] = []
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        found.append(key)
        kind = redis_client.type(key)
        if kind == b"string":
            found.append(redis_client.get(key) or b"")
        elif kind == b"set":
            found.extend(redis_client.smembers(key))
        elif kind == b"hash":
            for field, value in redis_client.hgetall(key).items():
                found += [field, value]
        elif kind == b"list":
            found.extend(redis_client.lrange(key, 0, -1))
        elif kind == b"zset":
            found.extend(member for member, _ in redis_client.zrange(key, 0, -1, withscores=True))
    return found


@pytest.fixture
def admin(db):
    return admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))


def test_the_raw_session_token_is_in_no_redis_key_or_value(admin, settings, redis_client):
    client = _log_in(settings)
    token = client.cookies[COOKIE].value
    assert client.get("/admin/").status_code == 200

    stored = _everything_stored(redis_client, settings.REDIS_KEY_PREFIX)
    digest = hashlib.sha256(token.encode()).hexdigest()

    assert token.startswith("sess_") and len(token) == 48
    assert not [item for item in stored if token.encode() in item]
    assert not [item for item in stored if token[5:20].encode() in item]  # nor a piece of it
    value = json.loads(redis_client.get(_session_key(settings, token)))
    assert value["userId"] == admin.pk
    assert set(value) == {"userId", "createdAt", "lastSeenAt", "authHash"}
    ttl = redis_client.ttl(_session_key(settings, token))
    assert (
        settings.ADMIN_SESSION_TTL_MINUTES * 60 - 5
        <= ttl
        <= settings.ADMIN_SESSION_TTL_MINUTES * 60
    )
    index = f"{settings.REDIS_KEY_PREFIX}admin:user_sessions:{admin.pk}"
    assert redis_client.smembers(index) == {digest.encode()}


def test_an_admin_api_session_keeps_its_token_out_of_redis_and_ends_when_idle(
    admin, settings, redis_client
):
    """The admin API (landed after the review) logs in to the same hashed store: the token is in
    no Redis key or value, and a session left idle past the timeout is refused there too."""
    settings.ADMIN_SESSION_IDLE_MINUTES = 60
    client = Client()
    login = client.post("/api/admin/login", {"password": PASSWORD}, content_type="application/json")
    assert login.status_code == 200, login.content
    token = client.cookies[COOKIE].value
    assert client.get("/api/admin/settings").status_code == 200

    stored = _everything_stored(redis_client, settings.REDIS_KEY_PREFIX)
    assert not [item for item in stored if token.encode() in item]
    assert not [item for item in stored if token[5:20].encode() in item]
    key = _session_key(settings, token)
    value = json.loads(redis_client.get(key))
    assert value["userId"] == admin.pk
    value["lastSeenAt"] = (timezone.now() - timedelta(minutes=61)).isoformat()
    redis_client.set(key, json.dumps(value), keepttl=True)

    idle = client.get("/api/admin/settings")

    assert idle.status_code == 401
    assert idle.json()["code"] == 40101
    assert redis_client.exists(key) == 0
    assert client.get("/admin/").status_code == 302  # gone for the Django admin too


def test_logging_out_deletes_the_session(admin, settings, redis_client):
    client = _log_in(settings)
    token = client.cookies[COOKIE].value

    response = client.post("/admin/logout/")

    assert response.status_code == 200
    assert redis_client.exists(_session_key(settings, token)) == 0
    replay = Client()
    replay.cookies[COOKIE] = token  # the stolen cookie after the log-out
    assert replay.get("/admin/").status_code == 302


@pytest.mark.slow
def test_a_password_change_ends_every_session_and_removes_the_generated_file(
    admin, settings, redis_client, tmp_path
):
    password_file = tmp_path / "admin-password.txt"
    password_file.write_text(PASSWORD + "\n")
    settings.GENERATED_ADMIN_PASSWORD_FILE = password_file
    changer, other = _log_in(settings), _log_in(settings)
    changer_token, other_token = changer.cookies[COOKIE].value, other.cookies[COOKIE].value

    response = changer.post(
        "/admin/password_change/",
        {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )

    assert response.status_code == 302
    assert response["Location"] == "/admin/password_change/done/"
    assert redis_client.exists(_session_key(settings, other_token)) == 0
    assert redis_client.exists(_session_key(settings, changer_token)) == 0
    assert other.get("/admin/").status_code == 302  # logged out
    # The browser that made the change goes on with a new session.
    assert changer.cookies[COOKIE].value != changer_token
    assert changer.get("/admin/").status_code == 200
    assert not password_file.exists()
    assert AdminUser.objects.get().check_password(NEW_PASSWORD)


def test_a_session_idle_past_the_timeout_ends(admin, settings, redis_client):
    settings.ADMIN_SESSION_IDLE_MINUTES = 60
    client = _log_in(settings)
    token = client.cookies[COOKIE].value
    key = _session_key(settings, token)
    value = json.loads(redis_client.get(key))
    # The admin walked away 61 minutes ago (the TTL, a day, is far from over).
    value["lastSeenAt"] = (timezone.now() - timedelta(minutes=61)).isoformat()
    redis_client.set(key, json.dumps(value), keepttl=True)

    response = client.get("/admin/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert redis_client.exists(key) == 0


def test_use_within_the_idle_timeout_keeps_the_session_and_records_it(
    admin, settings, redis_client
):
    client = _log_in(settings)
    key = _session_key(settings, client.cookies[COOKIE].value)
    value = json.loads(redis_client.get(key))
    earlier = (timezone.now() - timedelta(minutes=30)).isoformat()
    value["lastSeenAt"] = earlier
    redis_client.set(key, json.dumps(value), keepttl=True)

    assert client.get("/admin/").status_code == 200

    touched = json.loads(redis_client.get(key))
    assert touched["lastSeenAt"] > earlier
    assert touched["createdAt"] == value["createdAt"]
    assert redis_client.ttl(key) <= settings.ADMIN_SESSION_TTL_MINUTES * 60  # TTL kept, not reset


def test_the_admin_api_and_the_django_admin_share_one_session_store(admin, settings):
    token, expires_at = admin_session_login(user=admin, now=timezone.now())
    client = Client()
    client.cookies[COOKIE] = token

    assert client.get("/admin/").status_code == 200
    assert admin_session_user(token, now=timezone.now()) == admin
    django_token = _log_in(settings).cookies[COOKIE].value
    assert admin_session_user(django_token, now=timezone.now()) == admin
    assert admin_session_user("sess_" + "A" * 43, now=timezone.now()) is None
    assert expires_at > timezone.now()


class _Plant:
    """What a crafted pickle does when loaded: create ``marker`` (os.mkdir as the payload)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_pickled_session_value_planted_in_redis_executes_nothing(
    admin, settings, redis_client, tmp_path
):
    marker = tmp_path / "code-ran"
    token = "sess_" + "P" * 43
    redis_client.set(_session_key(settings, token), pickle.dumps(_Plant(marker)), ex=600)
    client = Client()
    client.cookies[COOKIE] = token

    response = client.get("/admin/")

    assert response.status_code == 302  # not a session: off to the log-in page
    assert not marker.exists()
    assert redis_client.exists(_session_key(settings, token)) == 0  # refused and removed


def test_a_pickled_cache_value_planted_in_redis_executes_nothing(settings, redis_client, tmp_path):
    marker = tmp_path / "code-ran"
    cache.set("security-probe", {"harmless": True})
    [cache_key] = redis_client.keys(f"{settings.REDIS_KEY_PREFIX}cache:*:security-probe")
    assert json.loads(redis_client.get(cache_key)) == {"harmless": True}  # JSON, not pickle

    redis_client.set(cache_key, pickle.dumps(_Plant(marker)))
    with pytest.raises(ValueError):
        cache.get("security-probe")

    assert not marker.exists()


def test_celery_refuses_a_pickled_task_message(tmp_path):
    from config.celery import app

    marker = tmp_path / "code-ran"
    content_type, encoding, payload = kombu_dumps(_Plant(marker), serializer="pickle")

    assert app.conf.task_serializer == "json"
    assert set(app.conf.accept_content) == {"json"}
    assert set(app.conf.result_accept_content) == {"json"}
    with pytest.raises(ContentDisallowed):
        kombu_loads(payload, content_type, encoding, accept=app.conf.accept_content)
    assert not marker.exists()


@override_settings(SESSION_COOKIE_SECURE=True, CSRF_COOKIE_SECURE=True)
def test_with_tls_the_session_cookie_is_secure_and_http_only(admin, settings):
    client = Client()
    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": settings.CPR_ADMIN_USERNAME, "password": PASSWORD},
        secure=True,
    )

    cookie = response.cookies[COOKIE]
    assert response.status_code == 302
    assert cookie["secure"] is True
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"


def test_over_tls_the_django_admin_cookies_are_secure_without_the_setting(admin, settings):
    """Finding 11 outside compose: behind one's own TLS proxy (SESSION_COOKIE_SECURE left at
    its default) the Django admin's session and CSRF cookies are Secure like the admin API's,
    so they never travel over plain http; plain-http ``make run`` keeps plain cookies."""
    import ipaddress

    assert settings.SESSION_COOKIE_SECURE is False
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32")]
    behind_tls = Client(headers={"X-Forwarded-Proto": "https"}, REMOTE_ADDR="127.0.0.1")

    page = behind_tls.get("/admin/login/")
    response = behind_tls.post(
        "/admin/login/?next=/admin/",
        {"username": settings.CPR_ADMIN_USERNAME, "password": PASSWORD},
    )

    assert page.cookies[settings.CSRF_COOKIE_NAME]["secure"] is True
    assert response.status_code == 302
    assert response.cookies[COOKIE]["secure"] is True
    assert response.cookies[COOKIE]["httponly"] is True
    plain = Client()
    plain.get("/admin/login/")
    answer = plain.post(
        "/admin/login/?next=/admin/",
        {"username": settings.CPR_ADMIN_USERNAME, "password": PASSWORD},
    )
    assert answer.cookies[COOKIE]["secure"] == ""


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_refuses_a_pickled_task_planted_in_the_broker(celery_worker, tmp_path):
    """Whoever can write to the broker sends a pickle-serialized task: the worker refuses to
    deserialize it (so the payload never runs) and goes on working."""
    from config.celery import app
    from proxy.tasks import delete_expired_cookies_task

    marker = tmp_path / "code-ran-in-the-worker"
    app.send_task("proxy.delete_expired_cookies", args=[_Plant(marker)], serializer="pickle")

    # The next (JSON) task is consumed after the planted one: once it is done, the planted
    # message has been handled.
    assert celery_worker.run(delete_expired_cookies_task) == 0
    log = celery_worker.log_path.read_text()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    assert not marker.exists()
