"""POST /v1/responses end to end: a real uvicorn, real PostgreSQL/Redis, the fake upstream."""

from __future__ import annotations

import json
import re

import pytest
import requests
from django.utils import timezone

from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from tests.fakes.codex import Reply
from tests.proxy.conftest import UvicornProcess, make_pool_account, post_responses


def _events(raw: bytes) -> list[dict]:
    events = []
    for frame in raw.decode().split("\n\n"):
        for line in frame.split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def test_streaming_success_is_forwarded_verbatim_and_recorded(proxy, upstream, client_key):
    make_pool_account("tok-a")

    response = post_responses(
        proxy, client_key, {"model": "gpt-5.4", "input": [{"role": "user", "content": "hi"}]}
    )

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-request-id"].startswith("req_")
    raw = response.content
    assert raw.endswith(b"data: [DONE]\n\n")
    events = _events(raw)
    assert [event["type"] for event in events][0] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == (
        "Hello from the fake upstream."
    )
    [sent] = upstream.responses_requests()
    assert sent.json() == {
        "model": "gpt-5.4",
        "input": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    assert sent.header("authorization") == "Bearer tok-a"

    proxy.drain()
    record = UsageRecord.objects.get()
    assert record.request_id == response.headers["x-request-id"]
    assert record.client_api_key_id == client_key.id
    assert (record.route, record.model, record.requested_model) == (
        "/v1/responses",
        "gpt-5.4",
        "gpt-5.4",
    )
    assert (
        record.input_tokens,
        record.output_tokens,
        record.cached_tokens,
        record.reasoning_tokens,
    ) == (12, 5, 4, 2)
    assert record.transport == "websocket" and record.attempt_index == 0
    assert record.response_id == events[-1]["response"]["id"]
    assert record.first_token_ms is not None and record.latency_ms >= record.first_token_ms
    assert record.message == "v1 responses stream completed"
    assert RequestTimeBucket.objects.get().success_count == 1


def test_non_stream_returns_the_terminal_response_object(proxy, upstream, client_key):
    make_pool_account("tok-a")

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False, "input": []})

    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "Hello from the fake upstream."
    assert response.headers["openai-model"] == "gpt-5.4"
    [sent] = upstream.responses_requests()
    assert sent.json()["stream"] is False  # forwarded as the client sent it


MISSING = "Missing client API key"
UNKNOWN = "Incorrect client API key provided: it is no key of this proxy"


@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (None, MISSING),
        ("", MISSING),
        ("Bearer", MISSING),
        ("bearer sk_x", MISSING),  # the prefix is exactly "Bearer " (spec §1.2)
        ("Basic abc", MISSING),
        ("Bearer nope", UNKNOWN),
        ("Bearer sk_unknown", UNKNOWN),
    ],
)
def test_an_authentication_failure_is_a_401_saying_which(
    proxy, upstream, client_key, authorization, message
):
    make_pool_account("tok-a")
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization

    response = requests.post(
        f"{proxy.url}/v1/responses", data='{"model":"gpt-5.4"}', headers=headers, timeout=10
    )

    assert response.status_code == 401
    assert response.json() == {
        "error": {"message": message, "type": "invalid_request_error", "code": "invalid_api_key"}
    }
    assert upstream.responses_requests() == []


def test_a_disabled_key_stops_working_at_once(proxy, upstream, client_key):
    make_pool_account("tok-a")
    assert (
        post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).status_code == 200
    )
    client_key.enabled = False
    client_key.save()

    refused = post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == (
        "This client API key is disabled: an operator can enable it again in the console"
    )


@pytest.mark.parametrize(
    "body", [b"not json", b"[1,2]", b'"text"', b"{}", b'{"model": ""}', b'{"model": 5}']
)
def test_invalid_bodies_are_rejected_without_an_upstream_call(proxy, upstream, client_key, body):
    make_pool_account("tok-a")

    response = post_responses(proxy, client_key, body)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert upstream.responses_requests() == []


def test_unknown_model_is_404(proxy, upstream, client_key):
    response = post_responses(proxy, client_key, {"model": "gpt-9-imaginary"})

    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "Model not found",
        "type": "invalid_request_error",
        "code": "model_not_found",
    }


def test_clean_eof_without_terminal_gets_the_synthetic_failure(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(kind="eof", cut_after=7, deltas=5))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    events = _events(response.content)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {
        "type": "server_error",
        "code": "stream_disconnected",
        "message": "Upstream stream closed before response.completed",
    }
    assert events[-1]["response"]["id"] == events[0]["response"]["id"]
    assert response.content.endswith(b"data: [DONE]\n\n")


def test_a_client_disconnect_closes_the_upstream_stream(proxy, upstream, client_key):
    import time

    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=200, delta_delay=0.05))

    with requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "input": []}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        stream=True,
        timeout=30,
    ) as response:
        first = next(response.iter_content(chunk_size=None))
        assert b"response.output_text.delta" in first or b"response.created" in first
    # The upstream sees its client (the proxy) go away long before the 10 s stream would end.
    deadline = time.monotonic() + 5
    while "tok-a" not in upstream.disconnects and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.disconnects == ["tok-a"]
    proxy.drain()
    error = OpsErrorLog.objects.get()
    assert (error.failure_class, error.status_code) == ("client_cancelled", 499)
    assert UsageRecord.objects.count() == 0


def test_success_and_failure_rows_are_exact(proxy, upstream, client_key):
    account = make_pool_account("tok-a", email="pool@example.com")
    response = post_responses(
        proxy,
        client_key,
        {
            "model": "gpt-5.4",
            "stream": False,
            "service_tier": "priority",
            "reasoning": {"effort": "high"},
        },
        **{"x-request-id": "client-chosen.id_1", "User-Agent": "tests/1.0"},
    )
    assert response.headers["x-request-id"] == "client-chosen.id_1"
    proxy.drain()

    record = UsageRecord.objects.values().get()
    assert record | {
        "id": None,
        "created_at": None,
        "latency_ms": None,
        "first_token_ms": None,
        "upstream_request_id": None,
        "response_id": None,
        "metadata_json": None,
    } == {
        "id": None,
        "request_id": "client-chosen.id_1",
        "client_api_key_id": client_key.id,
        "kind": "v1.response",
        "route": "/v1/responses",
        "provider": "openai",
        "account_id": account.id,
        "model": "gpt-5.4",
        "requested_model": "gpt-5.4",
        "upstream_model": "gpt-5.4",
        "service_tier": "priority",
        "status_code": 200,
        "transport": "websocket",
        "attempt_index": 0,
        "response_id": None,
        "upstream_request_id": None,
        "latency_ms": None,
        "first_token_ms": None,
        "input_tokens": 12,
        "output_tokens": 5,
        "cached_tokens": 4,
        "reasoning_tokens": 2,
        "message": "v1 responses completed",
        "metadata_json": None,
        "created_at": None,
    }
    assert record["upstream_request_id"].startswith("upstream_")
    assert record["response_id"] == response.json()["id"]
    metadata = record["metadata_json"]
    assert metadata["userAgent"] == "tests/1.0" and metadata["clientIp"] == "127.0.0.1"
    assert metadata["reasoningEffort"] == "high" and metadata["accountEmail"] == "pool@example.com"
    assert metadata["attempts"] == [{"index": 0, "accountId": account.id}]
    assert not {"inputTokens", "input_tokens", "usage", "responseId", "requestBody"} & set(metadata)
    bucket = RequestTimeBucket.objects.get()
    assert (bucket.service_tier, bucket.success_count, bucket.input_tokens) == ("priority", 1, 12)
    usage = account.usage
    usage.refresh_from_db()
    assert (usage.request_count, usage.input_tokens, usage.total_tokens) == (1, 12, 17)


def test_malformed_request_id_is_replaced(proxy, upstream, client_key):
    make_pool_account("tok-a")

    response = post_responses(
        proxy,
        client_key,
        {"model": "gpt-5.4", "stream": False},
        **{"x-request-id": "bad id with spaces"},
    )

    assert response.headers["x-request-id"].startswith("req_")


def test_review_forces_the_review_subagent(proxy, upstream, client_key):
    make_pool_account("tok-a")

    response = requests.post(
        f"{proxy.url}/v1/responses/review",
        data=json.dumps({"model": "gpt-5.4", "client_metadata": "not an object", "stream": False}),
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code == 200
    [sent] = upstream.responses_requests()
    # Created for the subagent (spec §1.4), then given the account's ids like any object.
    assert list(sent.json()["client_metadata"]) == [
        "x-openai-subagent",
        "x-codex-installation-id",
        "x-client-request-id",
    ]
    assert sent.json()["client_metadata"]["x-openai-subagent"] == "review"
    assert sent.header("x-openai-subagent") == "review"
    proxy.drain()
    assert UsageRecord.objects.get().route == "/v1/responses/review"


def test_aliases_resolve_and_use_websocket_is_removed(proxy, upstream, client_key):
    from proxy.models import RuntimeSettings

    RuntimeSettings.objects.update(
        model_aliases_json={
            "fast": "quick",
            "quick": "gpt-5.4-mini",
            "loop": "loop2",
            "loop2": "loop",
        }
    )
    make_pool_account("tok-a")

    response = post_responses(
        proxy,
        client_key,
        {"use_websocket": True, "model": "fast", "useWebSocket": 1, "stream": False},
    )

    assert response.status_code == 200
    [sent] = upstream.responses_requests()
    assert list(sent.json()) == ["model", "useWebSocket", "stream"]
    assert sent.json()["model"] == "gpt-5.4-mini"
    proxy.drain()
    record = UsageRecord.objects.get()
    assert (record.requested_model, record.model) == ("fast", "gpt-5.4-mini")


def test_body_size_limit_is_16_mib(proxy, upstream, client_key):
    make_pool_account("tok-a")
    big_but_allowed = json.dumps(
        {"model": "gpt-5.4", "stream": False, "input": "x" * (3 * 1024 * 1024)}
    )
    too_big = b'{"model": "gpt-5.4", "input": "' + b"x" * (16 * 1024 * 1024) + b'"}'

    assert post_responses(proxy, client_key, big_but_allowed).status_code == 200
    rejected = post_responses(proxy, client_key, too_big)

    assert rejected.status_code == 413
    assert rejected.json()["error"]["code"] == "request_too_large"
    assert len(upstream.responses_requests()) == 1


def test_a_too_large_body_gets_the_error_envelope_and_the_clients_request_id(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    too_big = b'{"model": "gpt-5.4", "input": "' + b"x" * (16 * 1024 * 1024) + b'"}'

    def chunks():  # no Content-Length: the limit must hold while the body arrives
        for start in range(0, len(too_big), 1024 * 1024):
            yield too_big[start : start + 1024 * 1024]

    declared = post_responses(proxy, client_key, too_big, **{"x-request-id": "big-upload.1"})
    streamed = post_responses(proxy, client_key, chunks(), **{"x-request-id": "big-upload.2"})

    for rejected, request_id in ((declared, "big-upload.1"), (streamed, "big-upload.2")):
        assert rejected.status_code == 413
        assert rejected.headers["x-request-id"] == request_id
        assert rejected.json() == {
            "error": {
                "message": "Request body is larger than 16 MiB",
                "type": "invalid_request_error",
                "code": "request_too_large",
            }
        }
    assert upstream.responses_requests() == []


def test_last_used_at_is_touched_after_the_debounce(proxy, upstream, client_key):
    import time

    make_pool_account("tok-a")
    assert client_key.last_used_at is None

    for _ in range(3):
        post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False})
    deadline = time.monotonic() + 5
    client_key.refresh_from_db()
    while client_key.last_used_at is None and time.monotonic() < deadline:
        time.sleep(0.1)
        client_key.refresh_from_db()

    assert client_key.last_used_at is not None


def test_a_telemetry_failure_never_fails_the_client(proxy, upstream, client_key):
    from django.db import connection

    make_pool_account("tok-a")
    with connection.cursor() as cursor:
        cursor.execute(
            "create function refuse_usage() returns trigger language plpgsql as "
            "$$ begin raise exception 'ledger is down'; end $$"
        )
        cursor.execute(
            "create trigger refuse_usage before insert on usage_records "
            "for each row execute function refuse_usage()"
        )
    try:
        response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})
        proxy.drain()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("drop trigger refuse_usage on usage_records")
            cursor.execute("drop function refuse_usage()")

    assert response.status_code == 200
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert UsageRecord.objects.count() == 0


def test_unknown_v1_and_api_paths_are_json_404(proxy):
    for path in ("/v1/nothing-here", "/api/admin/unknown", "/v1"):
        response = requests.get(f"{proxy.url}{path}", timeout=5)
        assert response.status_code == 404
        assert response.json() == {"code": 40401, "message": "API route not found", "data": None}


def test_the_json_404_of_an_unknown_path_echoes_the_request_id(proxy):
    # Spec §1.3: every answer carries x-request-id, the client's when well-formed, else ours.
    for path in ("/v1/nothing-here", "/api/other", "/api/admin/unknown", "/v1"):
        given = requests.get(
            f"{proxy.url}{path}", headers={"x-request-id": "req_404.check-1"}, timeout=5
        )
        generated = requests.get(
            f"{proxy.url}{path}", headers={"x-request-id": "not valid!"}, timeout=5
        )

        assert (given.status_code, given.headers["x-request-id"]) == (404, "req_404.check-1")
        assert generated.status_code == 404
        assert re.fullmatch(r"req_[0-9a-f-]{36}", generated.headers["x-request-id"])


@pytest.mark.subprocess
def test_an_unreachable_redis_gives_a_json_500_not_a_html_page(
    upstream, client_key, private_redis, transactional_db
):
    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    make_pool_account("tok-a")
    server = UvicornProcess(upstream.url, REDIS_URL=private_redis.url)
    try:
        private_redis.stop()  # a real outage: the server's Redis is gone
        responses = {
            request_id: requests.post(
                f"{server.url}/v1/responses",
                data=json.dumps({"model": "gpt-5.4", "input": []}),
                headers={"Authorization": f"Bearer {client_key.key}", "x-request-id": request_id},
                timeout=30,
            )
            for request_id in ("trace-me", "bad id with spaces")
        }
    finally:
        server.stop()

    for response in responses.values():
        assert response.status_code == 500
        assert response.json() == {
            "error": {
                "message": "The proxy failed to handle the request",
                "type": "server_error",
                "code": "internal_error",
            }
        }
    assert responses["trace-me"].headers["x-request-id"] == "trace-me"
    # A malformed id is replaced, as on every other answer (spec §1.3).
    assert re.fullmatch(
        r"req_[0-9a-f-]{36}", responses["bad id with spaces"].headers["x-request-id"]
    )
    assert upstream.responses_requests() == []
