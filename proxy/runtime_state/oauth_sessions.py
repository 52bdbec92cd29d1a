"""OAuth onboarding sessions (spec §6.3): the PKCE verifier and ``state`` of one authorize →
exchange round, for 30 minutes.

Keyed by SHA-256 of the session id (the id is a handle to finish the flow: it never appears in a
key name). The exchange claims a session with one GETDEL, so a session is used at most once.
After a FLUSHALL an operator simply starts again.
"""

from __future__ import annotations

import hashlib
import json

from proxy import redis_keys
from proxy.runtime_state import redis_client

SESSION_TTL_SECONDS = 30 * 60


def _key(session_id: str) -> str:
    return redis_keys.oauth_session(hashlib.sha256(session_id.encode()).hexdigest())


def oauth_session_store(*, session_id: str, value: dict) -> None:
    redis_client().set(_key(session_id), json.dumps(value), ex=SESSION_TTL_SECONDS)


def oauth_session_get(*, session_id: str) -> dict | None:
    raw = redis_client().get(_key(session_id))
    return json.loads(raw) if raw else None


def oauth_session_claim(*, session_id: str) -> dict | None:
    """Take the session (GETDEL): None when it expired or was used already."""
    raw = redis_client().getdel(_key(session_id))
    return json.loads(raw) if raw else None
