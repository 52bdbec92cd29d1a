"""OAuth onboarding of an account (spec §6.3): authorize (PKCE S256, ``state``, a 30-minute
session in Redis) → the operator logs in → exchange of the code for tokens → the account is
added (or, for an identity already in the pool, re-tokened).

``oauth_session_start`` returns the URL to open; ``oauth_session_exchange`` takes the URL the
browser was sent to (``http://localhost:1455/auth/callback?code=…&state=…``), or the code and
state. Errors are ``AccountOnboardingError`` subclasses with an ``http_status``: a bad or used
session, a bad callback or a state mismatch are 400; a failed exchange is 502.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from proxy.clients import oauth
from proxy.models import Account
from proxy.runtime_state.oauth_sessions import (
    SESSION_TTL_SECONDS,
    oauth_session_claim,
    oauth_session_get,
    oauth_session_store,
)
from proxy.services.account_tokens import (
    AccountOnboardingError,
    TokenExchangeFailed,
    account_upsert_from_tokens,
    resolved_from_token_set,
)

MAX_CALLBACK_LENGTH = 8192


class OAuthSessionInvalid(AccountOnboardingError):
    """No such session: unknown, expired (30 minutes) or already used."""


class OAuthCallbackInvalid(AccountOnboardingError):
    """The callback URL (or code/state) is malformed, denied, or its state does not match."""


@dataclass(frozen=True)
class OAuthSession:
    session_id: str
    auth_url: str
    expires_at: datetime


def oauth_session_start(*, now: datetime) -> OAuthSession:
    """A new onboarding session and the authorize URL the operator opens."""
    session_id = "oauth_" + secrets.token_urlsafe(24)
    state = secrets.token_hex(32)
    verifier = secrets.token_hex(64)
    oauth_session_store(
        session_id=session_id,
        value={
            "state": state,
            "codeVerifier": verifier,
            "redirectUri": oauth.REDIRECT_URI,
            "createdAt": now.isoformat(),
        },
    )
    return OAuthSession(
        session_id=session_id,
        auth_url=oauth.authorize_url(state=state, code_verifier=verifier),
        expires_at=now + timedelta(seconds=SESSION_TTL_SECONDS),
    )


def _from_callback(callback_url: str) -> tuple[str, str]:
    if len(callback_url) > MAX_CALLBACK_LENGTH:
        raise OAuthCallbackInvalid("The callback URL is too long.")
    query = parse_qs(urlsplit(callback_url.strip()).query)
    if query.get("error"):
        raise OAuthCallbackInvalid(f"The login was not completed ({query['error'][0][:100]}).")
    code = (query.get("code") or [""])[0]
    state = (query.get("state") or [""])[0]
    if not code or not state:
        raise OAuthCallbackInvalid("The callback URL has no code and state.")
    return code, state


def oauth_session_exchange(
    *,
    session_id: str,
    now: datetime,
    callback_url: str | None = None,
    code: str | None = None,
    state: str | None = None,
    label: str | None = None,
) -> tuple[Account, bool]:
    """Finish an onboarding session: returns (account, created).

    The session is checked first (a typo in the callback leaves it usable), then claimed once
    (GETDEL) right before the code is exchanged.
    """
    session = oauth_session_get(session_id=session_id)
    if session is None:
        raise OAuthSessionInvalid("Unknown or expired OAuth session: start again.")
    if callback_url:
        code, state = _from_callback(callback_url)
    if not code or not state:
        raise OAuthCallbackInvalid("Give the callback URL, or its code and state.")
    if not hmac.compare_digest(state.encode(), session["state"].encode()):
        raise OAuthCallbackInvalid("The callback's state does not match this session.")
    session = oauth_session_claim(session_id=session_id)
    if session is None:
        raise OAuthSessionInvalid("This OAuth session was used already: start again.")
    try:
        tokens = oauth.exchange_code(
            code=code, code_verifier=session["codeVerifier"], redirect_uri=session["redirectUri"]
        )
    except oauth.OAuthError as error:
        raise TokenExchangeFailed(
            f"The authorization code could not be exchanged: {error}"
        ) from None
    resolved = resolved_from_token_set(tokens, refresh_token=None, now=now)
    return account_upsert_from_tokens(resolved=resolved, now=now, label=label)
