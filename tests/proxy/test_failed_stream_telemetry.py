"""What a request leaves in the ledger and on its account, as the original leaves it (spec §7.1,
§7.3, §4.3): failed and cut streams feed the quota and record ``stream_disconnected`` with their
rate-limit headers; the image counters; the metadata ``rateLimitHeaders``,
``upstreamTraceHeaders``, ``websocketPool`` and ``effectiveModel``.

Mirrors the original's ``backend/tests/dispatch/service/usage_logging.rs`` (each test names the
one it follows).
"""

from __future__ import annotations

import threading

import pytest

from proxy.models import Account, AccountUsage
from telemetry.models import OpsErrorLog, UsageRecord
from tests.fakes.codex import Reply, number_events, text_events
from tests.proxy.conftest import make_pool_account, post_responses

IMAGE_TOOL = [{"type": "image_generation"}]


def _post(proxy, key, *, stream: bool, transport: str = "http_sse", **extra):
    body = {"model": "gpt-5.4", "input": "hello", "stream": stream, **extra}
    if transport == "http_sse":
        body["use_websocket"] = False
    return post_responses(proxy, key, body, **{"x-request-id": "req_ledger"})


def _counters(account) -> tuple:
    usage = AccountUsage.objects.get(account=account)
    return (
        usage.request_count,
        usage.image_input_tokens,
        usage.image_output_tokens,
        usage.image_request_count,
        usage.image_request_failed_count,
        usage.window_image_input_tokens,
        usage.window_image_output_tokens,
        usage.window_image_request_count,
        usage.window_image_request_failed_count,
    )


def _with_image_usage(input_tokens: int, output_tokens: int) -> list[dict]:
    """A text answer whose completed response reports the image tool's tokens the way the
    backend does (``response.tool_usage.image_gen``)."""
    events = text_events(text="image done", deltas=2, model="gpt-5.4")
    events[-1]["response"]["tool_usage"] = {
        "image_gen": {"input_tokens": input_tokens, "output_tokens": output_tokens}
    }
    return events


# ----------------------------------------------------------------------------- cut streams


@pytest.mark.parametrize("transport", ["http_sse", "websocket"])
@pytest.mark.parametrize("kind", ["eof", "cut"])
def test_a_stream_cut_mid_way_records_stream_disconnected_and_feeds_the_quota(
    proxy, upstream, client_key, transport, kind
):
    # Mirrors usage_logging.rs::responses_stream_should_record_usage_record_after_late_disconnect
    # ("eof": the upstream closes cleanly) and
    # ::responses_stream_should_record_failure_detail_after_transport_error ("cut": dropped).
    account = make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(
            kind=kind,
            cut_after=6,
            headers={"retry-after": "11", "x-codex-primary-used-percent": "88"},
        ),
    )

    response = _post(proxy, client_key, stream=True, transport=transport)

    assert response.status_code == 200
    assert b'"code": "stream_disconnected"' in response.content
    assert response.content.endswith(b"data: [DONE]\n\n")
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    assert (
        row.request_id,
        row.message,
        row.status_code,
        row.client_status_code,
        row.account_id,
        row.transport,
        row.failure_class,
    ) == (
        "req_ledger",
        "v1 responses stream failed",
        502,
        200,
        account.id,
        transport,
        "missing_completed",
    )
    metadata = row.metadata_json
    assert (metadata["stream"], metadata["failed"], metadata["synthetic"]) == (True, True, True)
    assert (metadata["upstreamCode"], metadata["failureSource"]) == ("stream_disconnected", "proxy")
    assert metadata["failureEvent"] == "response.failed"
    assert metadata["failureMessage"].startswith("Upstream stream closed before response.completed")
    assert metadata["failureDetail"].strip()
    assert ["retry-after", "11"] in metadata["rateLimitHeaders"]
    assert ["x-codex-primary-used-percent", "88"] in metadata["rateLimitHeaders"]
    assert "usage" not in metadata and "input_tokens" not in metadata  # no billing in ops rows
    assert UsageRecord.objects.count() == 0
    stored = Account.objects.get(pk=account.pk)
    assert stored.quota_json["snapshots"][0]["primary"]["used_percent"] == 88.0
    assert (stored.status, stored.quota_limit_reached) == ("active", False)


def test_a_stream_that_fails_after_output_feeds_the_quota_and_records_its_headers(
    proxy, upstream, client_key
):
    # A failed stream (not cut): its response.failed reached the client after real output; the
    # answer's rate limits still say where the account stands.
    account = make_pool_account("tok-a")
    events = text_events(text="partial", deltas=2, model="gpt-5.4")[:5]
    failed = {
        "type": "response.failed",
        "response": {
            "id": events[0]["response"]["id"],
            "status": "failed",
            "error": {"code": "server_error", "message": "broke half-way"},
        },
    }
    upstream.program(
        "tok-a",
        Reply(
            events=number_events([*events, failed]),
            headers={
                "x-codex-primary-used-percent": "100",
                "x-codex-primary-window-minutes": "300",
                "x-codex-primary-reset-after-seconds": "900",
            },
        ),
    )

    response = _post(proxy, client_key, stream=True)

    assert response.status_code == 200
    assert b"broke half-way" in response.content
    proxy.drain()
    [row] = OpsErrorLog.objects.all()
    assert (row.failure_class, row.status_code, row.client_status_code) == (
        "response_failed",
        502,
        200,
    )
    assert (row.metadata_json["upstreamCode"], row.metadata_json["failureSource"]) == (
        "server_error",
        "upstream",
    )
    assert ["x-codex-primary-used-percent", "100"] in row.metadata_json["rateLimitHeaders"]
    stored = Account.objects.get(pk=account.pk)
    assert (stored.status, stored.quota_limit_reached) == ("quota_exhausted", True)


# ----------------------------------------------------------------------------- image counters


@pytest.mark.parametrize("stream", [False, True])
def test_image_generation_that_produced_output_counts_one_image_request(
    proxy, upstream, client_key, stream
):
    # Mirrors usage_logging.rs::responses_should_record_image_generation_usage_when_tool_succeeds
    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply(events=_with_image_usage(31, 9)))

    response = _post(proxy, client_key, stream=stream, tools=IMAGE_TOOL)

    assert response.status_code == 200
    proxy.drain()
    assert _counters(account) == (1, 31, 9, 1, 0, 31, 9, 1, 0)


def test_image_generation_without_output_counts_a_failed_image_request(proxy, upstream, client_key):
    # Mirrors usage_logging.rs::
    # responses_should_record_failed_image_generation_attempt_when_tool_has_no_output
    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply())

    response = _post(proxy, client_key, stream=False, tools=IMAGE_TOOL)

    assert response.status_code == 200
    proxy.drain()
    assert _counters(account) == (1, 0, 0, 0, 1, 0, 0, 0, 1)


def test_a_request_without_the_image_tool_counts_no_image_request(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply(events=_with_image_usage(31, 9)))

    assert _post(proxy, client_key, stream=False).status_code == 200

    proxy.drain()
    # The tokens the upstream reports are counted; no image request was asked for.
    assert _counters(account) == (1, 31, 9, 0, 0, 31, 9, 0, 0)


def test_an_empty_answer_to_an_image_request_counts_a_failed_image_request(
    proxy, upstream, client_key
):
    # Spec §3.6: an empty completion of a request that declared the image tool counts a failed
    # image request (the original's record_empty_response_attempt).
    account = make_pool_account("tok-a")
    empty = text_events(text="", deltas=1, model="gpt-5.4")
    empty[-1]["response"]["output"] = []
    empty[-1]["response"]["usage"]["output_tokens"] = 0
    upstream.program("tok-a", Reply(events=[e for e in empty if "delta" not in e["type"]]))

    response = _post(proxy, client_key, stream=False, tools=IMAGE_TOOL)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "invalid_upstream_response"
    proxy.drain()
    usage = AccountUsage.objects.get(account=account)
    assert (usage.request_count, usage.empty_response_count) == (1, 1)
    assert (usage.image_request_count, usage.image_request_failed_count) == (0, 1)


def test_an_image_request_whose_stream_was_cut_counts_a_failed_image_request(
    proxy, upstream, client_key
):
    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply(kind="cut", cut_after=6))

    response = _post(proxy, client_key, stream=True, tools=IMAGE_TOOL)

    assert b"stream_disconnected" in response.content
    proxy.drain()
    assert _counters(account) == (1, 0, 0, 0, 1, 0, 0, 0, 1)


# ----------------------------------------------------------------------------- metadata keys


def test_a_usage_row_carries_the_answers_rate_limit_and_trace_headers(proxy, upstream, client_key):
    # Mirrors usage_logging.rs::responses_stream_should_record_usage_record_after_completed_stream
    # (rateLimitHeaders retry-after / x-ratelimit-limit-requests), plus the trace headers.
    make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(
            model="gpt-5.4-2026-03-01",
            headers={
                "retry-after": "7",
                "x-ratelimit-limit-requests": "99",
                "cf-ray": "8f1c2d3e4f5a6b7c-SJC",
                "x-openai-request-id": "oai-req-1",
            },
        ),
    )

    response = _post(proxy, client_key, stream=True)

    assert response.status_code == 200
    proxy.drain()
    row = UsageRecord.objects.get()
    metadata = row.metadata_json
    assert ["retry-after", "7"] in metadata["rateLimitHeaders"]
    assert ["x-ratelimit-limit-requests", "99"] in metadata["rateLimitHeaders"]
    traces = dict(metadata["upstreamTraceHeaders"])
    assert traces["cf-ray"] == "8f1c2d3e4f5a6b7c-SJC"
    assert traces["x-openai-request-id"] == "oai-req-1"
    assert traces["x-request-id"] == row.upstream_request_id
    assert metadata["cfRay"] == "8f1c2d3e4f5a6b7c-SJC"
    assert "websocketPool" not in metadata  # HTTP SSE
    # The effective model is the row's own columns (seed: a promoted field is not repeated in
    # metadata_json), the client's name before any alias in requested_model.
    assert (row.model, row.upstream_model, row.requested_model) == (
        "gpt-5.4-2026-03-01",
        "gpt-5.4-2026-03-01",
        "gpt-5.4",
    )
    assert "effectiveModel" not in metadata
    assert "requestBody" not in metadata and "responseBody" not in metadata


def test_an_ops_row_carries_the_effective_model_and_the_trace_headers(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(
            kind="eof",
            cut_after=6,
            model="gpt-5.4-2026-03-01",
            headers={"cf-ray": "9a9a-LHR"},
        ),
    )

    _post(proxy, client_key, stream=True)

    proxy.drain()
    row = OpsErrorLog.objects.get()
    assert row.metadata_json["effectiveModel"] == "gpt-5.4-2026-03-01"
    assert ["cf-ray", "9a9a-LHR"] in row.metadata_json["upstreamTraceHeaders"]
    assert row.metadata_json["cfRay"] == "9a9a-LHR"


def test_an_ops_row_of_a_refusal_without_headers_names_the_resolved_model(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    upstream.program(
        "tok-a", Reply(kind="status", status=400, body={"error": {"message": "bad input"}})
    )

    response = _post(proxy, client_key, stream=False)

    assert response.status_code == 400
    proxy.drain()
    row = OpsErrorLog.objects.get()
    assert row.metadata_json["effectiveModel"] == "gpt-5.4"
    assert "rateLimitHeaders" not in row.metadata_json  # the original leaves an empty list out


def test_websocket_rows_say_how_the_pool_served_them(proxy, upstream, client_key):
    make_pool_account("tok-a")
    conversation = {"prompt_cache_key": "conversation-pool"}

    first = _post(proxy, client_key, stream=False, transport="websocket", **conversation)
    second = _post(proxy, client_key, stream=False, transport="websocket", **conversation)

    assert (first.status_code, second.status_code) == (200, 200)
    proxy.drain()
    pools = [
        (row.transport, row.metadata_json["websocketPool"])
        for row in UsageRecord.objects.order_by("created_at", "id")
    ]
    assert pools == [("websocket", {"kind": "new"}), ("websocket", {"kind": "reuse"})]


def test_a_busy_conversation_socket_is_recorded_as_a_bypass(proxy, upstream, client_key):
    make_pool_account("tok-a")
    conversation = {"prompt_cache_key": "conversation-busy"}
    # The first request holds the conversation's pooled socket while the second one runs.
    upstream.program("tok-a", Reply(delta_delay=0.4), Reply())
    answers: list = []
    holder = threading.Thread(
        target=lambda: answers.append(
            _post(proxy, client_key, stream=False, transport="websocket", **conversation)
        )
    )
    holder.start()
    while upstream.websocket_requests() == []:
        threading.Event().wait(0.02)

    overlapping = _post(proxy, client_key, stream=False, transport="websocket", **conversation)
    holder.join(30)

    assert overlapping.status_code == 200 and answers[0].status_code == 200
    proxy.drain()
    pools = sorted(str(row.metadata_json["websocketPool"]) for row in UsageRecord.objects.all())
    assert pools == sorted([str({"kind": "new"}), str({"kind": "bypass", "reason": "busy"})])
