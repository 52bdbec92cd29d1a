"""A ``response.failed`` before any output is the request's error answer (spec §1.7), as the
original gives it: the status by the upstream code ("response.failed status mapping"), type and
code by that status (``codex_client_error`` for other 4xx, ``codex_api_error`` for 5xx), the
fixed message "Upstream Codex response failed"; a stream client gets 4xx as JSON and 5xx as a
200 SSE failure event. Over HTTP SSE and over the upstream WebSocket, stream and not.

Mirrors the original's ``backend/src/api/client/errors.rs`` (``responses_error_kind_for_status``,
``dispatch_failure_message``) and ``backend/src/dispatch/stream/sse_failure.rs``
(``status_code_for_stream_failure``), and its tests
``backend/tests/dispatch/service/responses_recovery.rs::
responses_explicit_unanswered_function_call_should_not_retry_without_full_context`` (a WS
``response.failed`` → 400 ``codex_client_error`` "Upstream Codex response failed").
"""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from proxy.models import Account
from telemetry.models import OpsErrorLog
from tests.fakes.codex import Reply, number_events
from tests.proxy.conftest import make_pool_account, post_responses

FIXED_MESSAGE = "Upstream Codex response failed"


def failed_first_frame(code: str, message: str, response_id: str = "resp_failed_first") -> Reply:
    """An upstream whose first (and only) event is a ``response.failed`` with ``code``: the
    original's "first SSE frame" failure. No ``error.type``: over the WebSocket such a frame is
    an event, not an error frame with a status (spec §2.7)."""
    failed = {
        "type": "response.failed",
        "response": {
            "id": response_id,
            "object": "response",
            "status": "failed",
            "error": {"code": code, "message": message},
        },
    }
    return Reply(events=number_events([failed]))


def _request(proxy, key, *, stream: bool, transport: str, **extra):
    body = {"model": "gpt-5.4", "input": "hello", "stream": stream, **extra}
    if transport == "http_sse":
        body["use_websocket"] = False
    return post_responses(proxy, key, body, **{"x-request-id": "req_first_frame"})


def _sse_events(content: bytes) -> list:
    events = []
    for block in content.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


# The original's mapping, code by code: (upstream code, client status, type, code).
MAPPING = [
    ("invalid_prompt", 400, "invalid_request_error", "codex_client_error"),
    ("context_window_exceeded", 400, "invalid_request_error", "codex_client_error"),
    ("cyber_policy_violation", 400, "invalid_request_error", "codex_client_error"),
    ("bad_request", 400, "invalid_request_error", "codex_client_error"),
    ("invalid_request", 400, "invalid_request_error", "codex_client_error"),
    ("resource_not_found", 400, "invalid_request_error", "codex_client_error"),
    ("forbidden_content", 403, "invalid_request_error", "invalid_api_key"),
    ("payment_required", 429, "rate_limit_error", "rate_limit_exceeded"),
    ("server_overloaded", 503, "server_error", "codex_api_error"),
    ("server_error", 502, "server_error", "codex_api_error"),
    # The real backend's code for a too-long prompt matches none of the substrings: 502.
    ("context_length_exceeded", 502, "server_error", "codex_api_error"),
]


@pytest.mark.parametrize(("upstream_code", "status", "error_type", "code"), MAPPING)
def test_a_first_frame_response_failed_is_the_originals_json_error(
    proxy, upstream, client_key, upstream_code, status, error_type, code
):
    # Mirrors api/client/errors.rs responses_error_kind_for_status + sse_failure.rs
    # status_code_for_stream_failure (non-stream: every status is a JSON answer).
    account = make_pool_account("tok-a")
    upstream.program("tok-a", failed_first_frame(upstream_code, "the upstream's own words"))

    response = _request(proxy, client_key, stream=False, transport="http_sse")

    assert response.status_code == status
    assert response.json() == {
        "error": {"message": FIXED_MESSAGE, "type": error_type, "code": code}
    }
    assert response.headers["x-request-id"] == "req_first_frame"
    assert upstream.tokens_called() == ["tok-a"]  # not a rotation: one account, one call
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    assert (
        row.request_id,
        row.message,
        row.failure_class,
        row.status_code,
        row.client_status_code,
        row.upstream_status_code,
        row.account_id,
        row.transport,
        row.response_id,
    ) == (
        "req_first_frame",
        "v1 responses upstream response failed",
        "response_failed",
        status,
        status,
        None,
        account.id,
        "http_sse",
        "resp_failed_first",
    )
    assert row.metadata_json["upstreamCode"] == upstream_code
    assert row.metadata_json["failureEvent"] == "response.failed"
    assert row.metadata_json["failureMessage"] == "the upstream's own words"
    assert row.metadata_json["failureSource"] == "upstream"
    assert Account.objects.get(pk=account.pk).status == "active"  # no account effect


@pytest.mark.parametrize("transport", ["http_sse", "websocket"])
@pytest.mark.parametrize("stream", [True, False])
def test_a_4xx_class_failure_is_json_over_both_transports_stream_or_not(
    proxy, upstream, client_key, transport, stream
):
    # Mirrors responses_recovery.rs::responses_explicit_unanswered_function_call_should_not_
    # retry_without_full_context: a WS response.failed → 400 codex_client_error, fixed message.
    make_pool_account("tok-a")
    upstream.program("tok-a", failed_first_frame("invalid_prompt", "Invalid prompt: too odd"))

    response = _request(proxy, client_key, stream=stream, transport=transport)

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {
            "message": FIXED_MESSAGE,
            "type": "invalid_request_error",
            "code": "codex_client_error",
        }
    }
    [sent] = upstream.responses_requests()
    assert sent.method == ("WS" if transport == "websocket" else "POST")
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    message = "v1 responses stream failed" if stream else "v1 responses upstream response failed"
    assert (row.message, row.status_code, row.client_status_code, row.transport) == (
        message,
        400,
        400,
        transport,
    )
    if transport == "websocket":
        assert row.metadata_json["websocketPool"] == {"kind": "new"}
    else:
        assert "websocketPool" not in row.metadata_json


@pytest.mark.parametrize("transport", ["http_sse", "websocket"])
def test_a_5xx_class_failure_is_a_200_failure_event_for_a_stream_client(
    proxy, upstream, client_key, transport
):
    # Spec §1.7: a stream whose client status would be 5xx gets one response.failed event
    # (the original's kind for the status, its fixed message), then [DONE].
    make_pool_account("tok-a")
    upstream.program("tok-a", failed_first_frame("server_overloaded", "Try again later"))

    response = _request(proxy, client_key, stream=True, transport=transport)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    failed, done = _sse_events(response.content)
    assert failed["type"] == "response.failed"
    assert failed["response"]["error"] == {
        "type": "server_error",
        "code": "codex_api_error",
        "message": FIXED_MESSAGE,
    }
    assert done == "[DONE]"
    assert b"Try again later" not in response.content  # the upstream event is not relayed
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    assert (row.status_code, row.client_status_code, row.failure_class) == (
        503,
        200,
        "response_failed",
    )


@pytest.mark.parametrize("transport", ["http_sse", "websocket"])
def test_a_failure_after_response_created_but_before_output_is_answered_the_same(
    proxy, upstream, client_key, transport
):
    # The proxy holds a stream until real output (spec §5.4), so response.created then
    # response.failed is still "before the first byte": the same answer as a first frame.
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(kind="failed", code="invalid_prompt", message="nope"))

    response = _request(proxy, client_key, stream=True, transport=transport)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "codex_client_error"
    assert b"response.created" not in response.content


def test_a_failure_after_output_is_relayed_as_the_upstream_sent_it(proxy, upstream, client_key):
    # After the first byte there is no error answer to give: the upstream's event goes through
    # (the original's responses_http_sse_should_commit_before_history_failure_after_real_output).
    make_pool_account("tok-a")
    created = {"type": "response.created", "response": {"id": "resp_late", "status": "x"}}
    delta = {"type": "response.output_text.delta", "item_id": "m", "delta": "Hel"}
    failed = {
        "type": "response.failed",
        "response": {"id": "resp_late", "error": {"code": "invalid_prompt", "message": "late"}},
    }
    upstream.program("tok-a", Reply(events=number_events([created, delta, failed])))

    response = _request(proxy, client_key, stream=True, transport="http_sse")

    assert response.status_code == 200
    events = _sse_events(response.content)
    assert [event["type"] for event in events[:-1]] == [
        "response.created",
        "response.output_text.delta",
        "response.failed",
    ]
    assert events[2]["response"]["error"] == {"code": "invalid_prompt", "message": "late"}


def test_a_first_frame_failure_rate_limits_update_the_quota_like_a_success(
    proxy, upstream, client_key
):
    # The original synced an answer's rate-limit headers as soon as it arrived
    # (sync_passive_rate_limit_headers before the first frame was read): a failed answer's
    # headers move the account exactly as a completed one's do.
    account = make_pool_account("tok-a")
    reply = failed_first_frame("invalid_prompt", "nope")
    reply.headers = {
        "x-codex-primary-used-percent": "100",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-after-seconds": "600",
        "retry-after": "600",
    }
    upstream.program("tok-a", reply)

    response = _request(proxy, client_key, stream=False, transport="http_sse")

    assert response.status_code == 400
    proxy.drain()
    stored = Account.objects.get(pk=account.pk)
    assert (stored.status, stored.quota_limit_reached) == ("quota_exhausted", True)
    assert (
        stored.quota_json["snapshots"][0]["primary"]["used_percent"],
        stored.quota_json["snapshots"][0]["primary"]["window_minutes"],
    ) == (100.0, 300)
    assert stored.quota_cooldown_until > timezone.now()
    [row] = OpsErrorLog.objects.all()
    assert row.metadata_json["rateLimitHeaders"] == [
        ["x-codex-primary-used-percent", "100"],
        ["x-codex-primary-window-minutes", "300"],
        ["x-codex-primary-reset-after-seconds", "600"],
        ["retry-after", "600"],
    ]
