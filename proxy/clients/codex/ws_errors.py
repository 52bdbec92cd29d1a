"""What the upstream WebSocket's frames say beyond their events (spec §2.4, §2.7): the HTTP-like
status of an error frame, the headers a frame wraps, the rate limits of ``codex.rate_limits``."""

from __future__ import annotations

import json
from typing import Any

ERROR_FRAME_TYPES = frozenset({"error", "response.failed"})

_CODE_STATUS = (
    ({"usage_limit_reached", "rate_limit_exceeded", "rate_limit_reached"}, 429),
    ({"quota_exhausted", "payment_required"}, 402),
    ({"unauthorized", "token_invalid", "token_expired", "account_deactivated"}, 401),
    ({"forbidden", "account_banned", "banned"}, 403),
    (
        {
            "previous_response_not_found",
            "invalid_encrypted_content",
            "missing_tool_output",
            "no_tool_output",
        },
        400,
    ),
    ({"websocket_connection_limit_reached"}, 503),
)
_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "rate_limit_error": 429,
    "server_error": 500,
    "api_error": 500,
}


def _error_of(frame: dict[str, Any]) -> dict[str, Any]:
    response = frame.get("response")
    nested = response.get("error") if isinstance(response, dict) else None
    if isinstance(nested, dict):
        return nested
    error = frame.get("error")
    return error if isinstance(error, dict) else {}


def _explicit_status(frame: dict[str, Any], error: dict[str, Any]) -> int | None:
    for holder in (frame, error):
        for name in ("status", "status_code"):
            value = holder.get(name)
            if isinstance(value, int) and not 200 <= value < 300 and 100 <= value < 600:
                return value
    return None


def error_frame_status(kind: str, raw: str) -> int | None:
    """The status an ``error`` / ``response.failed`` frame stands for, or None (not an error
    frame, or an unclassifiable ``response.failed``, which is forwarded as a normal event)."""
    if kind not in ERROR_FRAME_TYPES:
        return None
    try:
        frame = json.loads(raw)
    except ValueError:
        return 502 if kind == "error" else None
    if not isinstance(frame, dict):
        return None
    error = _error_of(frame)
    status = _explicit_status(frame, error)
    if status is not None:
        return status
    code = str(error.get("code") or frame.get("code") or "").lower()
    for codes, code_status in _CODE_STATUS:
        if code in codes:
            return code_status
    error_type = str(error.get("type") or "").lower()
    if error_type in _TYPE_STATUS:
        return _TYPE_STATUS[error_type]
    # An ``error`` frame nobody can classify is still an error; a response.failed is an event.
    return 502 if kind == "error" else None


def frame_headers(frame: dict[str, Any]) -> dict[str, str]:
    """The headers a frame wraps (``headers``), lower-cased, plus ``metadata.turn_state``."""
    found: dict[str, str] = {}
    headers = frame.get("headers")
    if isinstance(headers, dict):
        for name, value in headers.items():
            if isinstance(name, str) and isinstance(value, str | int | float):
                found[name.lower()] = str(value)
    metadata = frame.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("turn_state"), str):
        found["x-codex-turn-state"] = metadata["turn_state"]
    return found


def rate_limit_headers(frame: dict[str, Any]) -> dict[str, str]:
    """``codex.rate_limits`` as the rate-limit header pairs the HTTP answer would carry."""
    found = frame_headers(frame)
    limits = frame.get("rate_limits")
    if not isinstance(limits, dict):
        return found
    for window in ("primary", "secondary"):
        values = limits.get(window)
        if not isinstance(values, dict):
            continue
        for name, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                found[f"x-codex-{window}-{name.replace('_', '-')}"] = str(value)
    return found
