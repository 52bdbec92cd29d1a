"""What an upstream access token says about its account (spec §6.3): the JWT claims.

ChatGPT access tokens are JWTs whose payload carries the account's identity under
``https://api.openai.com/auth`` (``chatgpt_account_id``, ``chatgpt_user_id``,
``chatgpt_plan_type``) and its e-mail under ``https://api.openai.com/profile``. The signature is
not checked: the upstream checks it, we only read who the token is for and when it expires.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

import jwt
from jwt.types import Options

AUTH_CLAIM = "https://api.openai.com/auth"
PROFILE_CLAIM = "https://api.openai.com/profile"
_UNVERIFIED: Options = {"verify_signature": False, "verify_exp": False, "verify_aud": False}


@dataclass(frozen=True)
class TokenClaims:
    """The claims of an access token; fields are None when the token does not carry them."""

    chatgpt_account_id: str | None
    chatgpt_user_id: str | None
    plan_type: str | None
    email: str | None
    expires_at: datetime | None


def _text(value: object) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


@functools.lru_cache(maxsize=4096)
def token_claims(token: str) -> TokenClaims | None:
    """The claims of ``token``, or None when it is not a JWT (an opaque token)."""
    try:
        payload = jwt.decode(token, options=_UNVERIFIED, algorithms=None)
    except jwt.PyJWTError:
        return None
    if not isinstance(payload, dict):
        return None
    auth = payload.get(AUTH_CLAIM)
    auth = auth if isinstance(auth, dict) else {}
    profile = payload.get(PROFILE_CLAIM)
    profile = profile if isinstance(profile, dict) else {}
    expiry = payload.get("exp")
    expires_at = (
        datetime.fromtimestamp(expiry, tz=UTC)
        if isinstance(expiry, int | float) and not isinstance(expiry, bool)
        else None
    )
    return TokenClaims(
        chatgpt_account_id=_text(auth.get("chatgpt_account_id")),
        chatgpt_user_id=_text(auth.get("chatgpt_user_id")) or _text(auth.get("user_id")),
        plan_type=_text(auth.get("chatgpt_plan_type")),
        email=_text(profile.get("email")) or _text(payload.get("email")),
        expires_at=expires_at,
    )


def token_expiry(token: str) -> datetime | None:
    """``exp`` of a JWT access token; None when the token is opaque or has no numeric ``exp``
    (callers treat that as expired, pitfall §11.7)."""
    claims = token_claims(token)
    return claims.expires_at if claims else None
