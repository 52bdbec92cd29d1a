"""The admin log-in of both surfaces (the Django admin's form and the admin API): throttle,
password check, audit row.

Order matters: the throttle is asked first (one Redis script; a locked IP or username costs no
hash at all), an unknown username is refused without hashing (no Argon2 memory for made-up
names; the username is a setting, not a secret, so answering it faster reveals nothing worth
the ~100 MiB), and at most LOGIN_CONCURRENT_HASHES Argon2 checks run at once in a process.

Why not django-axes (the library the issue suggests): its cache handler slides the window on
every failure instead of spec §6.2's fixed 15-minute lock, counts a failure only after the
password was hashed (concurrent attempts all get through), lives in an auth backend and a
middleware tied to Django's request (the admin API needs the same limiter as a plain call),
brings three PostgreSQL tables outside the seed, and logs attempted usernames at WARNING (a
password typed into the username field would land in the log). What is left is two short Lua
scripts (``proxy.runtime_state.login_throttle``).
"""

from __future__ import annotations

import enum
import logging
import math
import threading
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError
from django.utils.crypto import constant_time_compare

from proxy.models import AdminLoginEvent, AdminUser
from proxy.runtime_state.login_throttle import (
    LoginSubjects,
    login_attempt_begin,
    login_attempt_failed,
    login_attempt_succeeded,
)

logger = logging.getLogger(__name__)

# Longer input is refused without hashing (a password field is no place for a megabyte).
LONGEST_PASSWORD = 1024
LONGEST_USERNAME = 256
LONGEST_USER_AGENT = 256

_hash_slots_lock = threading.Lock()
_hash_slots: threading.BoundedSemaphore | None = None


class LoginOutcome(enum.Enum):
    SUCCESS = "success"
    INVALID = "invalid"
    LOCKED = "locked"


@dataclass(frozen=True)
class LoginResult:
    outcome: LoginOutcome
    user: AdminUser | None = None
    # For LOCKED: when the client may try again (whole seconds, at least 1).
    retry_after_seconds: int = 0


def _slots() -> threading.BoundedSemaphore:
    global _hash_slots
    with _hash_slots_lock:
        if _hash_slots is None:
            _hash_slots = threading.BoundedSemaphore(settings.LOGIN_CONCURRENT_HASHES)
        return _hash_slots


def admin_login_attempt(
    *,
    username: str,
    password: str,
    client_ip: str | None,
    user_agent: str | None,
    surface: str,
    now: datetime,
) -> LoginResult:
    """Check ``username``/``password`` for the admin under the log-in throttle.

    Returns SUCCESS with the admin, INVALID (wrong username or password, or no hash slot), or
    LOCKED with the seconds to wait (the password was not checked; audited as a failure with
    reason ``locked``). Redis errors propagate: no throttle, no log-in.
    """
    subjects = LoginSubjects(client_ip=client_ip or "unknown", username=username[:LONGEST_USERNAME])
    wait_ms = login_attempt_begin(subjects)
    if wait_ms > 0:
        # Refused unchecked, but audited: an attack going on during a lock-out is visible. The
        # throttle does not count refused attempts, so they never lengthen the lock.
        _audit(now, surface, "failure", "locked", True, client_ip, user_agent)
        return LoginResult(
            LoginOutcome.LOCKED, retry_after_seconds=max(1, math.ceil(wait_ms / 1000))
        )

    user, reason = _check_credentials(username, password)
    if user is not None:
        login_attempt_succeeded(subjects)
        _audit(now, surface, "success", None, False, client_ip, user_agent)
        return LoginResult(LoginOutcome.SUCCESS, user=user)
    locked = login_attempt_failed(subjects) > 0
    _audit(now, surface, "failure", reason, locked, client_ip, user_agent)
    return LoginResult(LoginOutcome.INVALID)


def _check_credentials(username: str, password: str) -> tuple[AdminUser | None, str | None]:
    """(the admin, None) when both are right, else (None, why)."""
    if not constant_time_compare(username, settings.CPR_ADMIN_USERNAME):
        return None, "unknown_username"
    if not password or len(password) > LONGEST_PASSWORD:
        return None, "wrong_password"
    admin = AdminUser.objects.order_by("created_at", "id").first()
    if admin is None:
        return None, "unknown_username"
    slots = _slots()
    if not slots.acquire(timeout=settings.LOGIN_HASH_WAIT_SECONDS):
        logger.warning("log-in refused: every password-hash slot of this process stayed busy")
        return None, "busy"
    try:
        correct = admin.check_password(password)
    finally:
        slots.release()
    return (admin, None) if correct else (None, "wrong_password")


def _audit(
    now: datetime,
    surface: str,
    outcome: str,
    reason: str | None,
    locked_out: bool,
    client_ip: str | None,
    user_agent: str | None,
) -> None:
    try:
        AdminLoginEvent.objects.create(
            created_at=now,
            surface=surface,
            outcome=outcome,
            reason=reason,
            locked_out=locked_out,
            client_ip=client_ip,
            user_agent=(user_agent or "")[:LONGEST_USER_AGENT] or None,
        )
    except DatabaseError:
        logger.warning("could not record an admin log-in event", exc_info=True)
