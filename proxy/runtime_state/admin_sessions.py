"""Admin sessions (seed 004 §4B.1): the Redis key is the SHA-256 of the token, never the token.

One store for both admin surfaces: the Django admin reaches it through Django's session engine
(``proxy.sessions``), the admin API calls these functions. The token (``sess_`` + base64url of
32 random bytes) exists only in the client's ``cpr_admin_session`` cookie; Redis, its AOF and
every log see only its hash.

``<prefix>admin:session:<sha256 hex>`` holds one JSON object:

* ``userId``, ``createdAt`` — the seed's value (``userId`` is null for a session that has not
  logged in yet: Django keeps e.g. a CSRF failure's messages in one);
* ``lastSeenAt`` — for the idle timeout: a session unused for ``ADMIN_SESSION_IDLE_MINUTES``
  is gone, whatever its TTL says;
* ``authHash`` — Django's session hash of the password at log-in, so that a session from before a
  password change stops working even if the change did not go through our services;
* ``data`` — the rest of Django's session dictionary (only when non-empty; JSON, never pickle).

The TTL (``ADMIN_SESSION_TTL_MINUTES``) is set once when the session is created (``SET NX EX``)
and kept by every rewrite (``SET XX KEEPTTL``: a rewrite never brings back a deleted session).
``<prefix>admin:user_sessions:<user_id>`` (seed §8's kick-session index) is a SET of the user's
token hashes, its TTL pushed to the full session lifetime on every add, so that a password change
ends every session in one script. Members whose session expired are harmless and go with it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from common.redis_scripts import lua_script
from proxy import redis_keys
from proxy.runtime_state import redis_client

logger = logging.getLogger(__name__)

# lastSeenAt is rewritten at most this often: an admin clicking around costs one Redis write a
# minute, and the idle timeout is exact to within it.
TOUCH_INTERVAL = timedelta(seconds=60)

# KEYS[1] = session key, KEYS[2] = index key ("" for a session without user)
# ARGV[1] = value, ARGV[2] = "NX" (create) or "XX" (rewrite), ARGV[3] = TTL seconds,
# ARGV[4] = token hash
_STORE = lua_script("proxy", "admin_session_store")

# KEYS[1] = index key; ARGV[1] = the session key prefix (key = prefix .. token hash)
_END_ALL = lua_script("proxy", "admin_sessions_end_all")


@dataclass
class AdminSession:
    """What a session key holds (see the module docstring)."""

    user_id: str | None
    created_at: str
    last_seen_at: str
    auth_hash: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        value: dict[str, Any] = {
            "userId": self.user_id,
            "createdAt": self.created_at,
            "lastSeenAt": self.last_seen_at,
        }
        if self.auth_hash is not None:
            value["authHash"] = self.auth_hash
        if self.data:
            value["data"] = self.data
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> AdminSession | None:
        """The session in ``raw``, or None when it is not one of ours (anything else planted
        in the key, a pickle included, is data to refuse, never code to run)."""
        try:
            value = json.loads(raw)
            session = cls(
                user_id=value["userId"],
                created_at=value["createdAt"],
                last_seen_at=value.get("lastSeenAt", value["createdAt"]),
                auth_hash=value.get("authHash"),
                data=value.get("data") or {},
            )
        except (ValueError, UnicodeDecodeError, KeyError, TypeError):
            return None
        valid = (
            (session.user_id is None or isinstance(session.user_id, str))
            and isinstance(session.created_at, str)
            and isinstance(session.last_seen_at, str)
            and (session.auth_hash is None or isinstance(session.auth_hash, str))
            and isinstance(session.data, dict)
        )
        return session if valid else None

    def idle_since(self, now: datetime) -> timedelta:
        try:
            return now - datetime.fromisoformat(self.last_seen_at)
        except (ValueError, TypeError):
            return timedelta.max


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_session_token() -> str:
    """``sess_`` + base64url (no padding) of 32 random bytes."""
    return "sess_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def session_ttl_seconds() -> int:
    return max(1, settings.ADMIN_SESSION_TTL_MINUTES) * 60


def session_idle_timeout() -> timedelta:
    return timedelta(minutes=max(1, settings.ADMIN_SESSION_IDLE_MINUTES))


def _store(token: str, session: AdminSession, *, create: bool) -> bool:
    digest = token_hash(token)
    index = redis_keys.admin_user_sessions(session.user_id) if session.user_id else ""
    script = redis_client().register_script(_STORE)
    stored = script(
        keys=[redis_keys.admin_session(digest), index],
        args=[session.to_json(), "NX" if create else "XX", session_ttl_seconds(), digest],
    )
    return bool(stored)


def admin_session_store_new(*, token: str, session: AdminSession) -> bool:
    """Store ``session`` under a new ``token`` with the full TTL; False if the key exists."""
    return _store(token, session, create=True)


def admin_session_rewrite(*, token: str, session: AdminSession) -> bool:
    """Replace the value of a live session, keeping its TTL; False when it no longer exists
    (expired, logged out, or ended by a password change: it is not brought back)."""
    return _store(token, session, create=False)


def admin_session_create(
    *, user_id: str, auth_hash: str | None, now: datetime
) -> tuple[str, datetime]:
    """Log in: store a new session for ``user_id``; return (token for the client, expiry)."""
    stamp = now.isoformat()
    session = AdminSession(
        user_id=user_id, created_at=stamp, last_seen_at=stamp, auth_hash=auth_hash
    )
    while True:
        token = new_session_token()
        if admin_session_store_new(token=token, session=session):
            return token, now + timedelta(seconds=session_ttl_seconds())


def admin_session_get(token: str, *, now: datetime) -> AdminSession | None:
    """The live session of ``token``, or None (unknown, expired, idle too long, or not ours).

    A session idle past the timeout is deleted here. The caller decides whether a session whose
    ``lastSeenAt`` is older than TOUCH_INTERVAL gets rewritten (``admin_session_touch``).
    """
    key = redis_keys.admin_session(token_hash(token))
    raw = redis_client().get(key)
    if raw is None:
        return None
    session = AdminSession.from_json(raw)
    if session is None:
        logger.warning("admin session value is not a session; refused and deleted")
        redis_client().delete(key)
        return None
    if session.idle_since(now) > session_idle_timeout():
        admin_session_delete(token, user_id=session.user_id)
        return None
    return session


def admin_session_touch_due(session: AdminSession, *, now: datetime) -> bool:
    return session.idle_since(now) >= TOUCH_INTERVAL


def admin_session_touch(*, token: str, session: AdminSession, now: datetime) -> bool:
    """Record use of the session now (for the idle timeout); False when it is gone."""
    session.last_seen_at = now.isoformat()
    return admin_session_rewrite(token=token, session=session)


def admin_session_exists(token: str) -> bool:
    return bool(redis_client().exists(redis_keys.admin_session(token_hash(token))))


def admin_session_delete(token: str, *, user_id: str | None = None) -> bool:
    """Log out: delete the session (and its index entry); return whether one existed."""
    digest = token_hash(token)
    pipeline = redis_client().pipeline(transaction=True)
    pipeline.delete(redis_keys.admin_session(digest))
    if user_id:
        pipeline.srem(redis_keys.admin_user_sessions(user_id), digest)
    return bool(pipeline.execute()[0])


def admin_sessions_end_for_user(*, user_id: str) -> int:
    """End every session of ``user_id`` (a password change); return how many were live."""
    script = redis_client().register_script(_END_ALL)
    return int(
        script(
            keys=[redis_keys.admin_user_sessions(user_id)],
            args=[redis_keys.admin_session("")],
        )
    )
