"""Writes to ``admin_users``: the default admin on first start and password changes."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from redis import RedisError

from proxy.models import AdminUser
from proxy.password_validation import admin_password_problem
from proxy.runtime_state.admin_sessions import admin_sessions_end_for_user

logger = logging.getLogger(__name__)


class AdminPasswordRejected(ValueError):
    """The proposed admin password is missing, too short or on the weak list."""


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
    Then every session of the admin ends (both admin surfaces), and the generated first-start
    password file is removed: it no longer holds the password.
    Raises AdminPasswordRejected when the password is not acceptable.
    """
    _reject_unacceptable(password)
    with transaction.atomic():
        _lock_admin_users()
        admin = AdminUser.objects.order_by("created_at", "id").first()
        if admin is None:
            admin = _insert_admin(password=password, now=now)
        else:
            admin.set_password(password)
            admin.updated_at = now
            admin.save(update_fields=["password", "updated_at"])
    _end_sessions(admin)
    with contextlib.suppress(FileNotFoundError):
        settings.GENERATED_ADMIN_PASSWORD_FILE.unlink()
    return admin


def _end_sessions(admin: AdminUser) -> None:
    try:
        ended = admin_sessions_end_for_user(user_id=admin.pk)
    except RedisError:
        # Each session also carries the hash of the password it logged in with, so a session
        # missed here stops working at its next request all the same.
        logger.warning("password changed; Redis unavailable, sessions end at their next use")
        return
    logger.info("password changed; %s admin session(s) ended", ended)


def _reject_unacceptable(password: str) -> None:
    """The configured password validators (AUTH_PASSWORD_VALIDATORS: the admin rule)."""
    problem = admin_password_problem(password)
    if problem is not None:
        raise AdminPasswordRejected(f"the admin password {problem}")
    try:
        validate_password(password)
    except ValidationError as error:
        raise AdminPasswordRejected("the admin password " + " ".join(error.messages)) from None


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
