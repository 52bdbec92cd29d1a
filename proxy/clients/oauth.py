"""The OpenAI OAuth server (spec §2.1, §4.2, §6.3): token refresh, code exchange, authorize URL.

Every call goes to ``{OPENAI_AUTH_BASE}/oauth/token`` with a timeout and returns ``TokenSet`` or
raises one of:

* ``OAuthBanned`` (permanent) — the server says the refresh token was already used
  (``refresh_token_reused``: rotating refresh tokens are single-use) or the account is
  deactivated;
* ``OAuthInvalidGrant`` (permanent) — the grant is dead: ``invalid_grant``, ``invalid_token``,
  ``access_denied``, ``refresh_token_expired``, and the real server's ``token_expired`` /
  ``refresh_token_invalidated`` codes for a refresh token it no longer knows;
* ``OAuthTransportError`` (not permanent) — anything else: no answer, a 5xx, a body that is not
  the expected JSON. ``retryable`` marks connect/DNS/TLS-style network failures.

Tokens and codes never appear in an error: texts are built from the HTTP status and the
server's error code only, and the ``requests`` exception (whose text may hold the URL or body)
is neither kept nor chained.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from urllib.parse import urlencode

import requests
import urllib3
from django.conf import settings

from common import clock
from proxy.clients.outgoing import outgoing_session

logger = logging.getLogger(__name__)

CLIENT_ID = "app_EMoamEEZ73f0CkXaXp7hrann"
REDIRECT_URI = "http://localhost:1455/auth/callback"
SCOPE = "openid profile email offline_access"
RESPONSE_READ_CAP = 256 * 1024

_BANNED_MARKERS = ("account has been deactivated", "refresh_token_reused")
_INVALID_GRANT_MARKERS = (
    "invalid_grant",
    "invalid_token",
    "access_denied",
    "refresh_token_expired",
    # What auth.openai.com answers (401) for a refresh token it no longer accepts.
    "token_expired",
    "refresh_token_invalidated",
)

_session: requests.Session | None = None
_session_lock = threading.Lock()


def _shared_session() -> requests.Session:
    global _session
    with _session_lock:
        if _session is None:
            # No automatic retries (the builder's rule): a refresh token is single-use, so
            # repeating a request whose answer was lost could burn it; retrying is the
            # refresher's decision.
            timeout = settings.OPENAI_AUTH_TIMEOUT_SECONDS
            _session = outgoing_session(
                timeout=(min(10, timeout), timeout), pool_connections=2, pool_maxsize=8
            )
        return _session


@dataclass(frozen=True)
class TokenSet:
    """A token endpoint answer. ``refresh_token`` is None when the server kept the old one."""

    access_token: str
    refresh_token: str | None
    id_token: str | None
    expires_in: int | None = None

    def __repr__(self) -> str:  # never print the tokens
        return "TokenSet(<redacted>)"


class OAuthError(Exception):
    """A failed OAuth call. ``str(error)`` is safe to log and to show."""

    permanent = False
    outcome = "transport"

    def __init__(self, description: str, *, status: int | None = None, code: str | None = None):
        self.status = status
        self.code = code
        self.description = description
        super().__init__(description)


class OAuthBanned(OAuthError):
    permanent = True
    outcome = "banned"


class OAuthInvalidGrant(OAuthError):
    permanent = True
    outcome = "expired"


class OAuthTransportError(OAuthError):
    def __init__(self, description: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(description, status=status)
        self.retryable = retryable


def token_url() -> str:
    return f"{settings.OPENAI_AUTH_BASE}/oauth/token"


def refresh_tokens(refresh_token: str) -> TokenSet:
    """Exchange ``refresh_token`` for a new access token (and usually a new refresh token)."""
    return _token_call(
        {"grant_type": "refresh_token", "client_id": CLIENT_ID, "refresh_token": refresh_token}
    )


def exchange_code(*, code: str, code_verifier: str, redirect_uri: str = REDIRECT_URI) -> TokenSet:
    """The authorization-code grant of the PKCE flow (spec §6.3)."""
    return _token_call(
        {
            "grant_type": "authorization_code",
            "client_id": CLIENT_ID,
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": code_verifier,
        }
    )


def code_challenge(verifier: str) -> str:
    """PKCE S256: base64url(SHA-256(verifier)) without padding."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_url(*, state: str, code_verifier: str, redirect_uri: str = REDIRECT_URI) -> str:
    query = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": redirect_uri,
        "scope": SCOPE,
        "state": state,
        "code_challenge": code_challenge(code_verifier),
        "code_challenge_method": "S256",
        "id_token_add_organizations": "true",
        "codex_cli_simplified_flow": "true",
    }
    return f"{settings.OPENAI_AUTH_BASE}/oauth/authorize?{urlencode(query)}"


def _token_call(form: dict[str, str]) -> TokenSet:
    # OPENAI_AUTH_TIMEOUT_SECONDS bounds the whole call, not each read: a server that drips a
    # byte at a time would otherwise hold the call (and the refresh lease) indefinitely. The
    # deadline is checked after the headers and after every body read; one body read waits at
    # most the remaining time (socket timeout lowered before each read). Known gap: the status
    # line and headers are read by requests under the per-read timeout only.
    timeout = settings.OPENAI_AUTH_TIMEOUT_SECONDS
    deadline = clock.monotonic() + timeout
    try:
        response = _shared_session().post(
            token_url(),
            data=form,
            headers={"Accept": "application/json"},
            timeout=(min(10, timeout), timeout),
            allow_redirects=False,
            stream=True,
        )
        with response:
            body = bytearray()
            while len(body) <= RESPONSE_READ_CAP:
                if clock.monotonic() >= deadline:
                    raise _DeadlinePassed
                _limit_next_read(response, deadline)
                chunk = response.raw.read1(64 * 1024, decode_content=True)
                if not chunk:
                    break
                body += chunk
    except _DeadlinePassed:
        failure, retryable = "deadline passed", False
    except (requests.RequestException, urllib3.exceptions.HTTPError) as error:
        failure = type(error).__name__
        retryable = isinstance(error, requests.RequestException) and _is_connect_failure(error)
    else:
        text = bytes(body[:RESPONSE_READ_CAP]).decode("utf-8", "replace")
        return _classify(response.status_code, text)
    # Raised outside the except block: the requests exception is not kept as __context__.
    raise OAuthTransportError(f"token endpoint unreachable ({failure})", retryable=retryable)


class _DeadlinePassed(Exception):
    """The token call ran past OPENAI_AUTH_TIMEOUT_SECONDS."""


def _limit_next_read(response: requests.Response, deadline: float) -> None:
    """Lower the socket's timeout to the time left, so one read cannot outlast the deadline."""
    sock = getattr(getattr(response.raw, "connection", None), "sock", None)
    if sock is not None:
        sock.settimeout(max(0.05, deadline - clock.monotonic()))


def _is_connect_failure(error: requests.RequestException) -> bool:
    """DNS, refused connection, TLS handshake: the request never reached the server."""
    return isinstance(error, requests.ConnectionError | requests.exceptions.SSLError) and not (
        isinstance(error, requests.exceptions.ReadTimeout)
    )


def _error_code(payload: object) -> str | None:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        return code if isinstance(code, str) else None
    return error if isinstance(error, str) else None


def _classify(status: int, text: str) -> TokenSet:
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    lowered = text.lower()
    if 200 <= status < 300 and isinstance(payload, dict):
        access = payload.get("access_token")
        if isinstance(access, str) and access:
            refresh = payload.get("refresh_token")
            id_token = payload.get("id_token")
            expires_in = payload.get("expires_in")
            return TokenSet(
                access_token=access,
                refresh_token=refresh if isinstance(refresh, str) and refresh else None,
                id_token=id_token if isinstance(id_token, str) and id_token else None,
                expires_in=expires_in
                if isinstance(expires_in, int) and not isinstance(expires_in, bool)
                else None,
            )
        raise OAuthTransportError(
            f"token endpoint answered {status} without an access token", status=status
        )
    code = _error_code(payload)
    if any(marker in lowered for marker in _BANNED_MARKERS):
        raise OAuthBanned(
            f"token endpoint answered {status}: {code or 'account deactivated'}",
            status=status,
            code=code,
        )
    if any(marker in lowered for marker in _INVALID_GRANT_MARKERS):
        raise OAuthInvalidGrant(
            f"token endpoint answered {status}: {code or 'invalid grant'}", status=status, code=code
        )
    raise OAuthTransportError(
        f"token endpoint answered {status}" + (f": {code}" if code else ""), status=status
    )
