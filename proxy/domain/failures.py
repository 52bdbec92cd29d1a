"""What an upstream failure means for the account and for the client (spec §3.6, §1.7).

Each attempt ends in success or an ``AttemptFailure``. The failure's ``kind`` decides whether
the request moves on to the next account (``rotates``) and what happens to the account; when
no account is left, the client's error is built from the last failure kind.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

from common import clock
from proxy.clients.codex import (
    ERROR_BODY_READ_CAP,  # noqa: F401 - re-exported: how much of an error body is read
    CodexContinuationUnavailable,
    CodexError,
    CodexHTTPError,
    CodexTransportError,
)

SHORT_TEXT = 200


class FailureKind(enum.StrEnum):
    RATE_LIMITED = "rate_limited"
    QUOTA_EXHAUSTED = "quota_exhausted"
    EXPIRED = "expired"
    BANNED = "banned"
    CLOUDFLARE_CHALLENGE = "cloudflare_challenge"
    CLOUDFLARE_PATH_BLOCKED = "cloudflare_path_blocked"
    MODEL_UNSUPPORTED = "model_unsupported"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    EMPTY_RESPONSE = "empty_upstream_response"
    # Not rotated: returned to the client.
    CLIENT_ERROR = "upstream"
    RESPONSE_FAILED = "response_failed"
    INVALID_SSE = "invalid_sse"
    # A connection-local continuation the WebSocket pool cannot serve (``code`` = the reason);
    # the continuity rules decide (spec §5.3), never a plain rotation.
    CONTINUATION_UNAVAILABLE = "continuation_unavailable"


ROTATING_KINDS = frozenset(
    {
        FailureKind.RATE_LIMITED,
        FailureKind.QUOTA_EXHAUSTED,
        FailureKind.EXPIRED,
        FailureKind.BANNED,
        FailureKind.CLOUDFLARE_CHALLENGE,
        FailureKind.CLOUDFLARE_PATH_BLOCKED,
        FailureKind.MODEL_UNSUPPORTED,
        FailureKind.UPSTREAM_UNAVAILABLE,
        FailureKind.EMPTY_RESPONSE,
    }
)

# How the exhausted-pool message names each kind ("All accounts exhausted (2 rate-limited)").
EXHAUSTED_LABELS = {
    FailureKind.RATE_LIMITED: "rate-limited",
    FailureKind.QUOTA_EXHAUSTED: "quota-exhausted",
    FailureKind.EXPIRED: "expired",
    FailureKind.BANNED: "banned",
    FailureKind.CLOUDFLARE_CHALLENGE: "cloudflare-challenge",
    FailureKind.CLOUDFLARE_PATH_BLOCKED: "cloudflare-path-block",
    FailureKind.MODEL_UNSUPPORTED: "model-unsupported",
    FailureKind.UPSTREAM_UNAVAILABLE: "upstream-unavailable",
    FailureKind.EMPTY_RESPONSE: "empty-response",
}

CLOUDFLARE_MARKERS = (
    "cf-mitigated",
    "cf-chl-bypass",
    "_cf_chl",
    "cf_chl",
    "attention required",
    "just a moment",
)
BANNED_MARKERS = ("deactivated", "banned", "account_deactivated")
_MODEL_UNSUPPORTED = re.compile(
    r"model.{0,80}?(not[ _]supported|not[ _]available|unsupported)", re.I | re.S
)


@dataclass
class AttemptFailure:
    """Why one attempt on one account failed."""

    kind: FailureKind
    upstream_status: int | None = None
    body: bytes = b""
    detail: str = ""
    code: str | None = None  # upstream error code (SSE failure code or JSON error code)
    retry_after_seconds: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    response_id: str | None = None
    # Whether the upstream answered at all (an HTTP status arrived): such attempts count as
    # requests of the account; a connection that never got an answer does not.
    answered: bool = True
    # Whether the failure showed in the 200 SSE stream (an event, a cut, no output), not as
    # an HTTP status.
    in_stream: bool = False
    # How the upstream WebSocket pool served the attempt (``{kind, reason?}``), when it ran
    # over a pooled WebSocket stream; the ledger's ``websocketPool``.
    websocket_pool: dict[str, str] | None = None

    @property
    def rotates(self) -> bool:
        return self.kind in ROTATING_KINDS

    def short_text(self) -> str:
        text = self.body.decode("utf-8", "replace").strip() if self.body else self.detail
        return text[:SHORT_TEXT]


def _body_text(body: bytes) -> str:
    return body.decode("utf-8", "replace")


def json_or_none(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def is_cloudflare_challenge(body: bytes) -> bool:
    lowered = _body_text(body).lower()
    return any(marker in lowered for marker in CLOUDFLARE_MARKERS)


def looks_like_html(body: bytes, content_type: str | None) -> bool:
    if content_type and "html" in content_type.lower():
        return True
    return _body_text(body[:512]).lstrip().lower().startswith(("<!doctype html", "<html"))


def mentions_model_unsupported(text: str) -> bool:
    return bool(_MODEL_UNSUPPORTED.search(text))


def retry_after_seconds(headers: dict[str, str], body: bytes) -> float | None:
    """Seconds to wait before the account may serve again (spec §2.4), if the upstream said."""
    header = headers.get("retry-after")
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            pass
    payload = json_or_none(body) or {}
    error = payload["error"] if isinstance(payload.get("error"), dict) else payload
    for key in ("resets_in_seconds", "retry_after_seconds", "retry_after"):
        value = error.get(key)
        if isinstance(value, int | float):
            return max(0.0, float(value))
    resets_at = error.get("resets_at")
    if isinstance(resets_at, int | float):
        return max(0.0, resets_at - clock.now_seconds())
    match = re.search(r"try again in (\d+(?:\.\d+)?)(ms|s)", str(error.get("message", "")))
    if match:
        amount = float(match.group(1))
        return amount / 1000 if match.group(2) == "ms" else amount
    return None


def classify_http_failure(status: int, headers: dict[str, str], body: bytes) -> AttemptFailure:
    """Classify a non-200 upstream answer (after same-account 5xx retries are used up)."""
    text = _body_text(body)
    lowered = text.lower()
    content_type = headers.get("content-type")
    if status >= 500:
        return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, status, body)
    if status == 429:
        return AttemptFailure(
            FailureKind.RATE_LIMITED,
            status,
            body,
            retry_after_seconds=retry_after_seconds(headers, body),
        )
    if status == 402:
        return AttemptFailure(FailureKind.QUOTA_EXHAUSTED, status, body)
    if status == 401:
        banned = any(marker in lowered for marker in BANNED_MARKERS)
        return AttemptFailure(FailureKind.BANNED if banned else FailureKind.EXPIRED, status, body)
    if status == 403:
        if is_cloudflare_challenge(body):
            return AttemptFailure(FailureKind.CLOUDFLARE_CHALLENGE, status, body)
        if not looks_like_html(body, content_type):
            return AttemptFailure(FailureKind.BANNED, status, body)
        # An HTML 403 without Cloudflare markers proves nothing about the account.
        return AttemptFailure(FailureKind.CLIENT_ERROR, status, body)
    if status == 404 and not body.strip():
        return AttemptFailure(FailureKind.CLOUDFLARE_PATH_BLOCKED, status, body)
    if 400 <= status < 500 and mentions_model_unsupported(text):
        return AttemptFailure(FailureKind.MODEL_UNSUPPORTED, status, body)
    return AttemptFailure(FailureKind.CLIENT_ERROR, status, body)


def failure_from_error(error: CodexError) -> AttemptFailure:
    """The attempt failure of a Codex client error (HTTP status classified, 5xx retries used
    up; a transport error means no answer arrived)."""
    if isinstance(error, CodexHTTPError):
        failure = classify_http_failure(error.status, error.headers, error.body)
        failure.headers = error.headers
        return failure
    if isinstance(error, CodexContinuationUnavailable):
        return AttemptFailure(
            FailureKind.CONTINUATION_UNAVAILABLE,
            code=error.reason,
            detail=error.reason,
            answered=False,
        )
    detail = error.detail if isinstance(error, CodexTransportError) else type(error).__name__
    return AttemptFailure(FailureKind.UPSTREAM_UNAVAILABLE, detail=detail, answered=False)


_TOKEN_CODES = {
    "token_invalid",
    "token_expired",
    "token_revoked",
    "account_deactivated",
    "unauthorized",
    "invalid_api_key",
}
_QUOTA_CODES = {"quota_exceeded", "insufficient_quota"}
_RATE_LIMIT_CODES = {"rate_limit_exceeded", "usage_limit_reached", "rate_limit_reached"}
_TOKEN_MESSAGE = re.compile(r"token (?:was )?(revoked|invalid|expired)", re.I)


def classify_failed_event(event: dict[str, Any]) -> AttemptFailure:
    """Classify a ``response.failed`` / ``error`` SSE event seen before anything was sent."""
    error: dict[str, Any] = {}
    if isinstance(event.get("response"), dict) and isinstance(event["response"].get("error"), dict):
        error = event["response"]["error"]
    elif isinstance(event.get("error"), dict):
        error = event["error"]
    elif event.get("type") == "error":
        error = event
    code = str(error.get("code") or "").lower()
    message = str(error.get("message") or "")
    body = json.dumps(event).encode()
    response_id = (
        (event.get("response") or {}).get("id") if isinstance(event.get("response"), dict) else None
    )
    common: dict[str, Any] = {
        "body": body,
        "code": code or None,
        "detail": message,
        "response_id": response_id,
    }
    if mentions_model_unsupported(f"{code} {message}"):
        return AttemptFailure(FailureKind.MODEL_UNSUPPORTED, **common)
    if code in _QUOTA_CODES or "quota" in message.lower():
        return AttemptFailure(FailureKind.QUOTA_EXHAUSTED, **common)
    if code in _TOKEN_CODES or _TOKEN_MESSAGE.search(message):
        banned = any(marker in f"{code} {message}".lower() for marker in BANNED_MARKERS)
        return AttemptFailure(FailureKind.BANNED if banned else FailureKind.EXPIRED, **common)
    if code in _RATE_LIMIT_CODES:
        # The original did not rotate on these (its pitfall §11.11); a rate-limited account
        # cannot serve this request, so we treat it like an HTTP 429.
        seconds = retry_after_seconds({}, json.dumps({"error": error}).encode())
        return AttemptFailure(FailureKind.RATE_LIMITED, retry_after_seconds=seconds, **common)
    return AttemptFailure(FailureKind.RESPONSE_FAILED, **common)


# The upstream's "this history cannot be continued here" codes (spec §5.3): a continuation on
# its owner that fails with one of them is retried once on it with the full replay.
HISTORY_ERROR_CODES = frozenset(
    {
        "previous_response_not_found",
        "invalid_encrypted_content",
        "missing_tool_output",
        "no_tool_output",
    }
)


def history_error_code(failure: AttemptFailure) -> str | None:
    """The history error code of a failure (an SSE failure code or an HTTP 4xx JSON body's
    ``error.code``), or None."""
    code = (failure.code or "").lower()
    if code in HISTORY_ERROR_CODES:
        return code
    if failure.kind != FailureKind.CLIENT_ERROR or not failure.body:
        return None
    payload = json_or_none(failure.body) or {}
    error = payload["error"] if isinstance(payload.get("error"), dict) else payload
    code = str(error.get("code") or "").lower()
    return code if code in HISTORY_ERROR_CODES else None
