"""Writes to ``admin_users``: the default admin on first start and password changes."""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction

from proxy.models import AdminUser

MINIMUM_PASSWORD_LENGTH = 12
# codex-proxy spec §6.2: values that must never become the admin password.
WEAK_PASSWORDS = frozenset(
    {"", "admin", "123456", "password", "changeme", "change-me", "replace-me", "codex-proxy-rs"}
)


class AdminPasswordRejected(ValueError):
    """The proposed admin password is missing, too short or on the weak list."""


def admin_password_problem(password: str | None) -> str | None:
    """Return why ``password`` may not be the admin password, or None when it is acceptable."""
    if password is None or password == "":
        return "is missing"
    if password.strip().lower() in WEAK_PASSWORDS:
        return "is a well-known weak value"
    if len(password) < MINIMUM_PASSWORD_LENGTH:
        return f"is shorter than {MINIMUM_PASSWORD_LENGTH} characters"
    return None


def admin_user_exists() -> bool:
    return AdminUser.objects.exists()


def admin_user_create_default(*, password: str, now: datetime) -> AdminUser | None:
    """Create the admin when ``admin_users`` is empty; return it, or None if one existed.

    Web, worker and beat may start at the same moment: the table lock (taken in the
    transaction, released at commit) makes exactly one of them insert.
    Raises AdminPasswordRejected when the password is not acceptable.
    """
    _reject_unacceptable(password)
    with transaction.atomic():
        _lock_admin_users()
        if AdminUser.objects.exists():
            return None
        return _insert_admin(password=password, now=now)


def admin_user_set_password(*, password: str, now: datetime) -> AdminUser:
    """Set the password of the (single) admin, creating the row if the table is empty.

    Under the same table lock as the first-start insert, so it cannot add a second admin.
    Raises AdminPasswordRejected when the password is not acceptable.
    """
    _reject_unacceptable(password)
    with transaction.atomic():
        _lock_admin_users()
        admin = AdminUser.objects.order_by("created_at", "id").first()
        if admin is None:
            return _insert_admin(password=password, now=now)
        admin.set_password(password)
        admin.updated_at = now
        admin.save(update_fields=["password", "updated_at"])
    return admin


def _reject_unacceptable(password: str) -> None:
    problem = admin_password_problem(password)
    if problem is not None:
        raise AdminPasswordRejected(f"the admin password {problem}")


def _lock_admin_users() -> None:
    """Serialise writers of ``admin_users`` until the transaction ends (the mode conflicts with
    itself, while plain reads such as log-ins go on)."""
    with connection.cursor() as cursor:
        cursor.execute("lock table admin_users in share row exclusive mode")


def _insert_admin(*, password: str, now: datetime) -> AdminUser:
    admin = AdminUser(created_at=now, updated_at=now)  # the id is the model's default
    admin.set_password(password)
    admin.save(force_insert=True)
    return admin
