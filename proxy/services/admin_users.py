"""Writes to ``admin_users``: the default admin on first start and password changes."""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction

from proxy.identifiers import new_admin_user_id
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
    problem = admin_password_problem(password)
    if problem is not None:
        raise AdminPasswordRejected(f"the admin password {problem}")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("lock table admin_users in share row exclusive mode")
        if AdminUser.objects.exists():
            return None
        admin = AdminUser(id=new_admin_user_id(), created_at=now, updated_at=now)
        admin.set_password(password)
        admin.save(force_insert=True)
    return admin


def admin_user_set_password(*, password: str, now: datetime) -> AdminUser:
    """Set the password of the (single) admin, creating the row if the table is empty.

    Raises AdminPasswordRejected when the password is not acceptable.
    """
    problem = admin_password_problem(password)
    if problem is not None:
        raise AdminPasswordRejected(f"the admin password {problem}")
    created = admin_user_create_default(password=password, now=now)
    if created is not None:
        return created
    with transaction.atomic():
        admin = AdminUser.objects.select_for_update().order_by("created_at", "id").first()
        admin.set_password(password)
        admin.updated_at = now
        admin.save(update_fields=["password", "updated_at"])
    return admin
