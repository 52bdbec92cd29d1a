"""Admin sessions (seed 004 §4B.1): the key is the SHA-256 of the token, never the token."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from proxy import redis_keys
from proxy.runtime_state import redis_client


@dataclass(frozen=True)
class AdminSession:
    user_id: str
    created_at: str


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_session_token() -> str:
    """``sess_`` + base64url (no padding) of 32 random bytes."""
    return "sess_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def admin_session_create(*, user_id: str, now: datetime, ttl_minutes: int) -> tuple[str, datetime]:
    """Store a new session; return (token for the client, expiry). The TTL is set once here."""
    token = new_session_token()
    ttl_seconds = max(1, ttl_minutes) * 60
    value = json.dumps({"userId": user_id, "createdAt": now.isoformat()})
    redis_client().set(redis_keys.admin_session(token_hash(token)), value, ex=ttl_seconds)
    return token, now + timedelta(seconds=ttl_seconds)


def admin_session_get(token: str) -> AdminSession | None:
    """The live session of ``token``, or None (unknown, expired or malformed)."""
    raw = redis_client().get(redis_keys.admin_session(token_hash(token)))
    if raw is None:
        return None
    data = json.loads(raw)
    return AdminSession(user_id=data["userId"], created_at=data["createdAt"])


def admin_session_delete(token: str) -> bool:
    """Log out: delete the session; return whether one existed."""
    return bool(redis_client().delete(redis_keys.admin_session(token_hash(token))))
