"""What the upstream WebSocket's frames mean (spec §2.7, §2.4): error-frame statuses, wrapped
headers, rate limits, the ``response.create`` frame and the SSE re-framing."""

from __future__ import annotations

import json

import pytest

from proxy.clients.codex.websocket import _sse, opening_headers, response_create_frame
from proxy.clients.codex.ws_errors import error_frame_status, frame_headers, rate_limit_headers


def _frame(**fields) -> str:
    return json.dumps({"type": "error", **fields})


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (_frame(status=429, error={"code": "whatever"}), 429),
        (_frame(status=200, error={"code": "usage_limit_reached"}), 429),
        (_frame(error={"code": "rate_limit_reached"}), 429),
        (_frame(error={"code": "payment_required"}), 402),
        (_frame(error={"code": "token_expired"}), 401),
        (_frame(error={"code": "account_banned"}), 403),
        (_frame(error={"code": "previous_response_not_found"}), 400),
        (_frame(error={"code": "websocket_connection_limit_reached"}), 503),
        (_frame(error={"type": "invalid_request_error"}), 400),
        (_frame(error={"type": "authentication_error"}), 401),
        (_frame(error={"type": "permission_error"}), 403),
        (_frame(error={"type": "rate_limit_error"}), 429),
        (_frame(error={"type": "api_error"}), 500),
        (_frame(error={"message": "???"}), 502),
    ],
)
def test_error_frames_are_classified_to_an_http_like_status(raw, status):
    assert error_frame_status("error", raw) == status


def test_a_response_failed_frame_without_a_known_code_is_a_normal_event():
    unknown = {"type": "response.failed", "response": {"error": {"code": "context_too_long"}}}
    limited = {"type": "response.failed", "response": {"error": {"code": "rate_limit_exceeded"}}}

    assert error_frame_status("response.failed", json.dumps(unknown)) is None
    assert error_frame_status("response.failed", json.dumps(limited)) == 429
    assert error_frame_status("response.output_text.delta", "{}") is None


def test_wrapped_headers_turn_state_and_rate_limits_become_header_pairs():
    assert frame_headers(
        {"headers": {"X-Codex-Turn-State": "ts", "retry-after": 7}, "metadata": {}}
    ) == {"x-codex-turn-state": "ts", "retry-after": "7"}
    assert frame_headers({"metadata": {"turn_state": "ts-2"}}) == {"x-codex-turn-state": "ts-2"}
    limits = {
        "type": "codex.rate_limits",
        "rate_limits": {
            "primary": {"used_percent": 42.5, "window_minutes": 300, "reset_at": 1700000000},
            "secondary": {"used_percent": 3},
        },
    }
    assert rate_limit_headers(limits) == {
        "x-codex-primary-used-percent": "42.5",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": "1700000000",
        "x-codex-secondary-used-percent": "3",
    }


def test_the_create_frame_keeps_the_body_in_order_and_stamps_the_start():
    body = {"model": "m", "input": [], "client_metadata": {"a": "b"}}

    frame = json.loads(response_create_frame(body))

    assert body == {"model": "m", "input": [], "client_metadata": {"a": "b"}}  # not changed

    assert list(frame) == ["type", "model", "input", "client_metadata"]
    assert frame["type"] == "response.create"
    assert frame["client_metadata"]["a"] == "b"
    assert frame["client_metadata"]["x-codex-ws-stream-request-start-ms"].isdigit()
    created = json.loads(response_create_frame({"model": "m"}))
    assert set(created["client_metadata"]) == {"x-codex-ws-stream-request-start-ms"}
    untouched = json.loads(response_create_frame({"model": "m", "client_metadata": "x"}))
    assert untouched["client_metadata"] == "x"


def test_events_are_reframed_as_sse_and_the_opening_drops_content_type_and_accept():
    raw = '{"type":"response.output_text.delta","delta":"hi"}'

    assert _sse("response.output_text.delta", raw) == (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"delta":"hi"}\n\n',
        raw.encode(),
    )
    multi_line, data = _sse("x", '{\n"type": "x"\n}')
    assert b"\n\n" not in multi_line[:-2] and b"\n" not in data
    # Mirrors the original's backend/tests/upstream/openai/transport/headers.rs:
    # websocket_connection_should_build_standard_opening_headers_around_business_headers
    # (Host is aiohttp's, first; the key's slot gets aiohttp's key).
    assert [
        name
        for name, _ in opening_headers(
            [("authorization", "Bearer t"), ("content-type", "application/json"), ("accept", "x")]
        )
    ] == [
        "Connection",
        "Upgrade",
        "Sec-WebSocket-Version",
        "Sec-WebSocket-Key",
        "authorization",
        "sec-websocket-extensions",
    ]


def test_an_events_type_is_read_alike_however_its_json_is_spaced_or_escaped():
    from proxy.clients.codex.ws_reading import event_type

    compact = event_type('{"type":"response.output_text.delta","delta":"hi"}')
    spaced = event_type('{"type": "response.output_text.delta", "delta": "hi"}')
    later = event_type('{"delta": "hi", "type": "response.output_text.delta"}')
    escaped = event_type('{"type": "a\\"b"}')

    assert compact[0] == spaced[0] == later[0] == "response.output_text.delta"
    assert escaped[0] == 'a"b'
    assert event_type('{"type": 5}')[0] is None and event_type("[1]") == (None, None)
