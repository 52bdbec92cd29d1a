"""What the client gets when a request fails (spec §1.7): ``ClientError`` (the OpenAI error
envelope and its status), ``ClientFailure`` (the one exception that carries it to
``proxy.v1.errors.openai_errors``), the error built from the attempt failure that ended a
request, and the ops message of the row it leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.domain.failures import (
    EXHAUSTED_LABELS,
    ROTATING_KINDS,
    AttemptFailure,
    FailureKind,
    history_error_code,
    json_or_none,
)


@dataclass(frozen=True)
class ClientError:
    status: int
    error_type: str
    code: str
    message: str
    raw_body: bytes | None = None  # an upstream JSON error passed through verbatim

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.error_type, "code": self.code}}


class ClientFailure(Exception):
    """The client gets ``error`` (OpenAI envelope, its status): the one exception a dispatch
    or a view's parsing raises for an error answer; ``proxy.v1.errors.openai_errors`` maps it.

    ``as_event``: a stream route whose client expects a 200 SSE ``response.failed`` event for
    server-side failures (spec §1.7). ``retry_after``: seconds for a ``Retry-After`` header.
    """

    def __init__(
        self, error: ClientError, *, as_event: bool = False, retry_after: int | None = None
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.as_event = as_event
        self.retry_after = retry_after


NO_ACCOUNTS = ClientError(
    503,
    "server_error",
    "no_available_accounts",
    "No available accounts. All accounts are expired or rate-limited.",
)
ALL_BUSY = ClientError(
    503,
    "server_error",
    "no_available_accounts",
    "All accounts are at their concurrency limit. Retry the request.",
)
PREVIOUS_RESPONSE_UNAVAILABLE = ClientError(
    400,
    "invalid_request_error",
    "previous_response_unavailable",
    "Previous response context is unavailable. Start a new conversation or resend the "
    "complete input without previous_response_id.",
)
CONTINUATION_CONNECTION_BUSY = ClientError(
    503,
    "server_error",
    "continuation_connection_busy",
    "The previous response connection is busy. Retry the request.",
)
INVALID_UPSTREAM = ClientError(
    502, "server_error", "invalid_upstream_response", "Invalid upstream Codex response"
)


# The ops_error_logs message of the row a failed request leaves, by why it failed: the pool
# ran out (or had nothing) — "dispatch failed" — or the upstream itself refused the request.
_OPS_MESSAGES = {
    FailureKind.CLIENT_ERROR: "v1 responses upstream rejected the request",
    FailureKind.RESPONSE_FAILED: "v1 responses upstream response failed",
    FailureKind.INVALID_SSE: "v1 responses upstream stream invalid",
}
DISPATCH_FAILED = "v1 responses dispatch failed"
STREAM_FAILED_BEFORE_OUTPUT = "v1 responses upstream stream failed before any output"
# A stream client's request that a ``response.failed`` ended before its first byte (spec §7.1
# "per pre-commit stream failure").
STREAM_FAILED = "v1 responses stream failed"


def ops_message(failure: AttemptFailure | None, *, stream: bool = False) -> str:
    """The ops message of a request that ended with ``failure``: what the upstream did when it
    refused the request or broke its stream before any output; "dispatch failed" when the pool
    ran out on HTTP answers (or had no account: ``failure`` None). ``stream``: the client
    asked for a stream."""
    if failure is None:
        return DISPATCH_FAILED
    if stream and failure.kind == FailureKind.RESPONSE_FAILED and failure.in_stream:
        return STREAM_FAILED
    if failure.kind in _OPS_MESSAGES:
        return _OPS_MESSAGES[failure.kind]
    if failure.in_stream:
        return STREAM_FAILED_BEFORE_OUTPUT
    return DISPATCH_FAILED


def failed_event_status(code: str) -> int:
    """HTTP status of a terminal ``response.failed`` by its upstream code (spec §1.7)."""
    code = code.lower()
    if "model" in code and ("not_supported" in code or "not_available" in code):
        return 400
    if "invalid_request" in code or "not_found" in code:
        return 400
    if any(
        part in code for part in ("context_window", "invalid_prompt", "cyber_policy", "bad_request")
    ):
        return 400
    if "rate_limit" in code or "usage_limit" in code:
        return 429
    if (
        "unauthorized" in code
        or "invalid_api_key" in code
        or code
        in {
            "token_invalid",
            "token_expired",
            "account_deactivated",
        }
    ):
        return 401
    if "forbidden" in code or "banned" in code:
        return 403
    if "payment" in code or "quota" in code:
        return 429
    if "server_overloaded" in code:
        return 503
    return 502


RESPONSE_FAILED_MESSAGE = "Upstream Codex response failed"
UPSTREAM_REQUEST_FAILED_MESSAGE = "Upstream Codex request failed"


def _kind_for_status(status: int) -> tuple[str, str]:
    """(type, code) of an upstream refusal by the client's status, as the original's
    ``responses_error_kind_for_status``: 429 rate limit, 402 quota, 401/403 the key, any other
    4xx ``codex_client_error``, anything else ``codex_api_error``."""
    if status == 429:
        return "rate_limit_error", "rate_limit_exceeded"
    if status == 402:
        return "insufficient_quota", "insufficient_quota"
    if status in (401, 403):
        return "invalid_request_error", "invalid_api_key"
    if 400 <= status < 500:
        return "invalid_request_error", "codex_client_error"
    return "server_error", "codex_api_error"


def response_failed_error(failure: AttemptFailure) -> ClientError:
    """The client's error for a terminal ``response.failed`` / ``error`` event that ended the
    request before any output (spec §1.7 "response.failed status mapping"): the status by the
    upstream code, type and code by that status, the original's fixed message (the upstream's
    own text stays in the ops row). A history code the dispatch could not recover is the
    original's ``previous_response_unavailable``."""
    if history_error_code(failure) is not None:
        return PREVIOUS_RESPONSE_UNAVAILABLE
    status = failed_event_status(failure.code or "")
    error_type, code = _kind_for_status(status)
    return ClientError(status, error_type, code, RESPONSE_FAILED_MESSAGE)


def _type_for_status(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def client_error_for(failure: AttemptFailure, count: int) -> ClientError:
    """The error a client gets when ``failure`` ended the request (``count`` accounts failed
    with the same kind when the pool ran out)."""
    kind = failure.kind
    if kind in ROTATING_KINDS:
        upstream_text = failure.short_text()
        message = f"All accounts exhausted ({count} {EXHAUSTED_LABELS[kind]})."
        if upstream_text:
            message += f" Codex upstream error: {upstream_text}"
        if kind == FailureKind.RATE_LIMITED:
            return ClientError(429, "rate_limit_error", "rate_limit_exceeded", message)
        if kind == FailureKind.QUOTA_EXHAUSTED:
            return ClientError(429, "insufficient_quota", "insufficient_quota", message)
        if kind == FailureKind.EXPIRED:
            return ClientError(401, "invalid_request_error", "invalid_api_key", message)
        if kind == FailureKind.BANNED:
            return ClientError(
                failure.upstream_status or 403, "invalid_request_error", "invalid_api_key", message
            )
        if kind in (FailureKind.CLOUDFLARE_CHALLENGE, FailureKind.CLOUDFLARE_PATH_BLOCKED):
            return ClientError(502, "server_error", "upstream_error", message)
        if kind == FailureKind.MODEL_UNSUPPORTED:
            return ClientError(400, "invalid_request_error", "model_not_found", message)
        if kind == FailureKind.EMPTY_RESPONSE:
            return INVALID_UPSTREAM
        return ClientError(503, "server_error", "upstream_error", message)
    if kind == FailureKind.RESPONSE_FAILED:
        return response_failed_error(failure)
    if kind == FailureKind.INVALID_SSE:
        return INVALID_UPSTREAM
    if kind == FailureKind.CONTINUATION_UNAVAILABLE:
        if failure.code == "connection_busy":
            return CONTINUATION_CONNECTION_BUSY
        return PREVIOUS_RESPONSE_UNAVAILABLE
    # An upstream error returned to the client: a JSON 4xx passes through verbatim.
    status = failure.upstream_status or 502
    if 400 <= status < 500 and json_or_none(failure.body) is not None:
        return ClientError(
            status, _type_for_status(status), "upstream_error", "", raw_body=failure.body
        )
    if not (400 <= status < 500 or status == 503):
        status = 502
    if 400 <= status < 500:
        error_type, code = _kind_for_status(status)
        return ClientError(status, error_type, code, UPSTREAM_REQUEST_FAILED_MESSAGE)
    return ClientError(status, "server_error", "upstream_error", UPSTREAM_REQUEST_FAILED_MESSAGE)
