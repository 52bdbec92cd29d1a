"""The single admin: default creation rules, Argon2, password changes, Django admin log-in."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import threading
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from config.startup import StartupRefused, ensure_default_admin
from proxy.models import AdminUser
from proxy.services.admin_users import admin_user_create_default

STRONG_PASSWORD = "correct horse battery staple"


def _admin_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("select id, password_hash from admin_users")
        return cursor.fetchall()


@pytest.mark.django_db
def test_default_admin_is_created_from_the_configured_password_with_argon2():
    out = io.StringIO()
    with override_settings(CPR_ADMIN_DEFAULT_PASSWORD=STRONG_PASSWORD):
        ensure_default_admin(out=out)

    [(admin_id, password_hash)] = _admin_rows()
    assert admin_id.startswith("admin_") and len(admin_id) == len("admin_") + 32
    assert password_hash.startswith("argon2$argon2id$")
    assert STRONG_PASSWORD not in password_hash
    assert AdminUser.objects.get().check_password(STRONG_PASSWORD)
    assert "from CPR_ADMIN_DEFAULT_PASSWORD" in out.getvalue()
    assert STRONG_PASSWORD not in out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("password", "reason"),
    [
        (None, "is missing"),
        ("", "is missing"),
        ("short-pass1", "is shorter than 12 characters"),
        ("codex-proxy-rs", "is a well-known weak value"),
        ("CHANGEME", "is a well-known weak value"),
    ],
)
def test_start_up_is_refused_for_an_unusable_default_password(password, reason):
    with (
        override_settings(CPR_ADMIN_DEFAULT_PASSWORD=password, EMBEDDED_POSTGRES=False),
        pytest.raises(StartupRefused, match=f"CPR_ADMIN_DEFAULT_PASSWORD {reason}"),
    ):
        ensure_default_admin(out=io.StringIO())

    assert _admin_rows() == []


@pytest.mark.django_db
def test_existing_admin_needs_no_configured_password():
    admin_user_create_default(password=STRONG_PASSWORD, now=datetime.now(UTC))
    with override_settings(CPR_ADMIN_DEFAULT_PASSWORD=None, EMBEDDED_POSTGRES=False):
        ensure_default_admin(out=io.StringIO())

    assert len(_admin_rows()) == 1


@pytest.mark.django_db
def test_embedded_stores_without_password_generate_one_printed_once(tmp_path):
    password_file = tmp_path / "admin-password.txt"
    first, second = io.StringIO(), io.StringIO()
    with override_settings(
        CPR_ADMIN_DEFAULT_PASSWORD=None,
        EMBEDDED_POSTGRES=True,
        GENERATED_ADMIN_PASSWORD_FILE=password_file,
    ):
        ensure_default_admin(out=first)
        ensure_default_admin(out=second)

    generated = password_file.read_text().strip()
    assert len(generated) >= 20
    assert stat.S_IMODE(os.stat(password_file).st_mode) == 0o600
    assert generated in first.getvalue()
    assert second.getvalue() == ""
    assert AdminUser.objects.get().check_password(generated)


@pytest.mark.django_db(transaction=True)
def test_concurrent_starts_create_exactly_one_admin():
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait()
            admin_user_create_default(password=STRONG_PASSWORD, now=datetime.now(UTC))
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert AdminUser.objects.count() == 1


@pytest.mark.slow
@pytest.mark.django_db
def test_set_admin_password_command_changes_the_hash(monkeypatch):
    admin_user_create_default(password=STRONG_PASSWORD, now=datetime.now(UTC))
    old_hash = AdminUser.objects.get().password
    monkeypatch.setattr("sys.stdin", io.StringIO("a brand new passphrase\n"))

    call_command("set_admin_password", "--password-stdin", stdout=io.StringIO())

    admin = AdminUser.objects.get()
    assert admin.password != old_hash
    assert admin.check_password("a brand new passphrase")
    assert not admin.check_password(STRONG_PASSWORD)
    assert admin.updated_at > admin.created_at


@pytest.mark.django_db
def test_set_admin_password_command_refuses_weak_values_and_changes_nothing(monkeypatch):
    admin_user_create_default(password=STRONG_PASSWORD, now=datetime.now(UTC))
    old_hash = AdminUser.objects.get().password
    monkeypatch.setattr("sys.stdin", io.StringIO("password\n"))

    with pytest.raises(CommandError, match="weak value; nothing changed"):
        call_command("set_admin_password", "--password-stdin", stdout=io.StringIO())

    assert AdminUser.objects.get().password == old_hash


@pytest.mark.django_db
def test_django_admin_login_with_the_admin_credentials_keeps_the_session_in_redis(
    client, redis_client, settings
):
    admin_user_create_default(password=STRONG_PASSWORD, now=datetime.now(UTC))

    page = client.get("/admin/login/")
    assert page.status_code == 200
    assert b"Username" in page.content

    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": settings.CPR_ADMIN_USERNAME, "password": STRONG_PASSWORD},
    )
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    index = client.get("/admin/")
    assert index.status_code == 200
    assert b"Site administration" in index.content

    token = client.cookies["cpr_admin_session"].value
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert token.startswith("sess_")
    assert redis_client.exists(f"{settings.REDIS_KEY_PREFIX}admin:session:{digest}") == 1
    assert list(redis_client.scan_iter(match=f"*{token}*")) == []
    with connection.cursor() as cursor:
        cursor.execute("select to_regclass('django_session')")
        assert cursor.fetchone() == (None,)
    assert AdminUser.objects.get().last_login is not None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("username", "password"),
    [("admin", "wrong password here"), ("root", STRONG_PASSWORD), ("", STRONG_PASSWORD)],
)
def test_django_admin_login_rejects_wrong_credentials(client, username, password):
    admin_user_create_default(password=STRONG_PASSWORD, now=datetime.now(UTC))

    response = client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}
    )

    assert response.status_code == 200  # the form again, with an error
    assert "cpr_admin_session" not in response.cookies
    assert client.get("/admin/").status_code == 302
