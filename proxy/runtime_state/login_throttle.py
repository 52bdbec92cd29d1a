"""The log-in throttle (codex-proxy spec §6.2) in Redis, shared by every worker process and by
both admin surfaces.

Two subjects per attempt, the client IP and the username (its HMAC: the key name never holds
what was typed). Each counts attempts in a fixed window (INCR, expiring LOGIN_FAILURE_WINDOW
after the first); an attempt is counted *before* the password is checked, so concurrent
attempts cannot all slip past the limit. When a failed attempt leaves a subject at the limit,
that subject is locked out for LOGIN_LOCKOUT (a key with PX) and its count restarts. A success
clears both counts. Every step is one Lua script. After a FLUSHALL the counts start again.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.utils.crypto import salted_hmac

from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.runtime_state import redis_client

# KEYS = attempts(ip), attempts(user), lock(ip), lock(user); ARGV = limit, window ms, lock ms
# Returns 0 when the attempt may go on, else the milliseconds until it could.
_BEGIN = lua_script("proxy", "login_attempt_begin")

# Same KEYS and ARGV. Returns the lock-out in ms when this failure set one, else 0.
_FAILED = lua_script("proxy", "login_attempt_failed")


@dataclass(frozen=True)
class LoginSubjects:
    """The throttle keys of one attempt."""

    client_ip: str
    username: str

    @property
    def keys(self) -> list[str]:
        ip = f"ip:{self.client_ip}"
        user = "user:" + salted_hmac("login-throttle", self.username.lower()).hexdigest()[:32]
        return [
            redis_keys.login_attempts(ip),
            redis_keys.login_attempts(user),
            redis_keys.login_lock(ip),
            redis_keys.login_lock(user),
        ]


def _args() -> list[int]:
    return [
        settings.LOGIN_FAILURE_LIMIT,
        settings.LOGIN_FAILURE_WINDOW_SECONDS * 1000,
        settings.LOGIN_LOCKOUT_SECONDS * 1000,
    ]


def login_attempt_begin(subjects: LoginSubjects) -> int:
    """Count an attempt about to check a password. Returns 0 when it may, else the
    milliseconds until the IP or username may try again (nothing was counted)."""
    script = redis_client().register_script(_BEGIN)
    return int(script(keys=subjects.keys, args=_args()))


def login_attempt_failed(subjects: LoginSubjects) -> int:
    """Record that the attempt failed; returns the lock-out in ms if it set one, else 0."""
    script = redis_client().register_script(_FAILED)
    return int(script(keys=subjects.keys, args=_args()))


def login_attempt_succeeded(subjects: LoginSubjects) -> None:
    """A correct password: both counts start again."""
    redis_client().delete(*subjects.keys[:2])
