"""The upstream WebSocket and its pool (spec §1.8, §2.7) against the fake upstream's WebSocket:
reuse, the busy-key one-shot, the per-account cap, stale reuse, max age, the timeouts, the HTTP
fallback and the connection-local continuation errors."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from proxy.clients import codex
from proxy.loop_resources import close_current_loop_resources
from telemetry.models import UsageRecord
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses


def _ask(proxy, key, conversation: str = "conv-1", **extra):
    body = {
        "model": "gpt-5.4",
        "stream": False,
        "input": [{"role": "user", "content": "hi"}],
        "prompt_cache_key": conversation,
        **extra,
    }
    return post_responses(proxy, key, body)


def _connections(upstream) -> list[int]:
    return [sent.extra["connection"] for sent in upstream.websocket_requests()]


def test_a_conversation_reuses_its_upstream_socket(proxy, upstream, client_key):
    make_pool_account("tok-a")

    for _ in range(3):
        assert _ask(proxy, client_key).status_code == 200

    assert upstream.ws_connections["tok-a"] == 1
    assert len(set(_connections(upstream))) == 1
    frames = [sent.extra["frame"] for sent in upstream.websocket_requests()]
    assert all(frame["type"] == "response.create" for frame in frames)
    assert all(
        frame["client_metadata"]["x-codex-ws-stream-request-start-ms"].isdigit() for frame in frames
    )
    proxy.drain()
    assert set(UsageRecord.objects.values_list("transport", flat=True)) == {"websocket"}


def test_the_opening_carries_the_http_headers_without_content_type_and_accept(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")

    assert _ask(proxy, client_key).status_code == 200

    [sent] = upstream.websocket_requests()
    names = [name.lower() for name, _ in sent.headers]
    assert "content-type" not in names and "accept" not in names
    assert sent.header("authorization") == "Bearer tok-a"
    assert sent.header("openai-beta") == "responses_websockets=2026-02-06"
    assert sent.header("upgrade").lower() == "websocket"
    assert "permessage-deflate" in sent.header("sec-websocket-extensions")
    assert sent.header("x-codex-installation-id")


def test_two_conversations_at_once_on_one_key_get_a_one_shot_socket(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=6, delta_delay=0.2), Reply(deltas=6, delta_delay=0.2))

    with ThreadPoolExecutor(2) as executor:
        answers = list(executor.map(lambda _: _ask(proxy, client_key), range(2)))

    assert [answer.status_code for answer in answers] == [200, 200]
    assert upstream.ws_connections["tok-a"] == 2
    # The pooled one stays for the next turn, the one-shot was closed after its response.
    assert _ask(proxy, client_key).status_code == 200
    assert upstream.ws_connections["tok-a"] == 2


def test_an_account_at_its_pool_cap_gets_one_shot_sockets(proxy, upstream, client_key, settings):
    settings.CODEX_WS_POOL_MAX_PER_ACCOUNT = 1
    make_pool_account("tok-a")

    for conversation in ("conv-1", "conv-2", "conv-2"):
        assert _ask(proxy, client_key, conversation).status_code == 200

    # conv-1 holds the account's one pooled socket; conv-2 bypassed the pool both times.
    assert upstream.ws_connections["tok-a"] == 3
    assert _ask(proxy, client_key, "conv-1").status_code == 200
    assert upstream.ws_connections["tok-a"] == 3


def test_a_pooled_socket_that_died_while_idle_is_replaced_before_any_output(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    assert _ask(proxy, client_key).status_code == 200
    upstream.kill_websockets("tok-a")

    response = _ask(proxy, client_key)

    assert response.status_code == 200, response.text
    assert upstream.ws_connections["tok-a"] == 2
    proxy.drain()
    assert list(UsageRecord.objects.values_list("transport", flat=True)) == ["websocket"] * 2


def test_a_socket_past_its_max_age_is_not_reused(proxy, upstream, client_key, settings):
    settings.CODEX_WS_MAX_AGE_SECONDS = 0
    make_pool_account("tok-a")

    for _ in range(2):
        assert _ask(proxy, client_key).status_code == 200

    assert upstream.ws_connections["tok-a"] == 2


def test_silence_between_frames_ends_the_stream_at_the_idle_timeout(
    proxy, upstream, client_key, settings
):
    settings.CODEX_WS_IDLE_TIMEOUT_SECONDS = 0.5
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=4, delta_delay=3))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 200
    assert b"websocket idle timeout" in response.content
    assert b"stream_disconnected" in response.content


def test_a_silent_fresh_socket_is_tried_once_more_then_http_sse_serves(
    proxy, upstream, client_key, settings
):
    settings.CODEX_WS_INITIAL_EVENT_TIMEOUT_SECONDS = 0.5
    make_pool_account("tok-a")
    upstream.program(
        "tok-a", Reply(first_byte_delay=3), Reply(first_byte_delay=3), Reply(text="over http")
    )

    response = _ask(proxy, client_key)

    assert response.status_code == 200
    assert response.json()["output"][0]["content"][0]["text"] == "over http"
    assert [sent.method for sent in upstream.responses_requests()] == ["WS", "WS", "POST"]
    proxy.drain()
    assert UsageRecord.objects.get().transport == "http_sse"


def test_use_websocket_false_speaks_http_sse_only(proxy, upstream, client_key):
    make_pool_account("tok-a")

    assert _ask(proxy, client_key, use_websocket=False).status_code == 200

    [sent] = upstream.responses_requests()
    assert sent.method == "POST" and "use_websocket" not in sent.json()
    assert upstream.ws_connections["tok-a"] == 0
    proxy.drain()
    assert UsageRecord.objects.get().transport == "http_sse"


def test_a_previous_response_id_needs_the_websocket_no_http_fallback(proxy, upstream, client_key):
    make_pool_account("tok-a")
    # Two: aiohttp asks an idempotent GET again once on a kept-alive connection that dropped.
    upstream.program("tok-a", *[Reply(kind="drop", ws_handshake=True)] * 2)

    response = _ask(proxy, client_key, previous_response_id="resp_elsewhere", store=True)

    assert response.status_code == 503
    assert upstream.http_requests() == []


def test_store_false_continues_on_the_socket_that_holds_the_previous_response(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    first = _ask(proxy, client_key, store=False)
    assert first.status_code == 200

    second = _ask(proxy, client_key, store=False, previous_response_id=first.json()["id"])

    assert second.status_code == 200, second.text
    assert len(set(_connections(upstream))) == 1
    assert upstream.websocket_requests()[1].json()["previous_response_id"] == first.json()["id"]


# -- the client's connection-local continuation errors, against the fake directly


def _run(coroutine):
    async def run_and_close():
        try:
            return await coroutine
        finally:
            await close_current_loop_resources()

    return asyncio.run(run_and_close())


def _headers(token: str) -> list[tuple[str, str]]:
    from django.conf import settings

    return codex.build_headers(
        codex.Call.RESPONSES,
        fingerprint=codex.render_fingerprint(settings.CODEX_FINGERPRINT),
        credentials=codex.Credentials("acct_ws", token, "org-ws"),
    )


def _body(**extra) -> dict:
    return {"model": "gpt-5.4", "input": [], "stream": True, **extra}


async def _read(stream) -> list[bytes]:
    chunks = [chunk async for chunk in stream.chunks()]
    stream.release()
    return chunks


@pytest.mark.django_db
def test_connection_local_continuation_errors(upstream):
    async def scenario() -> list[str]:
        reasons = []
        call = {"headers": _headers("tok-ws"), "account_id": "acct_ws"}
        # Nothing pooled for this account yet.
        try:
            await codex.open_websocket_responses(
                body=_body(store=False, previous_response_id="resp_x"),
                conversation_id="lc_1",
                previous_response_id="resp_x",
                connection_local=True,
                **call,
            )
        except codex.CodexContinuationUnavailable as error:
            reasons.append(error.reason)
        stream = await codex.open_websocket_responses(
            body=_body(store=False), conversation_id="lc_1", **call
        )
        await _read(stream)
        # The conversation's socket exists but its latest response is another one.
        try:
            await codex.open_websocket_responses(
                body=_body(store=False, previous_response_id="resp_other"),
                conversation_id="lc_1",
                previous_response_id="resp_other",
                connection_local=True,
                **call,
            )
        except codex.CodexContinuationUnavailable as error:
            reasons.append(error.reason)
        # The socket that holds it is busy with another request.
        from proxy.clients.codex.ws_pool import websocket_pool

        [latest] = [
            socket.latest_response_id for socket in websocket_pool.get_or_create()._idle.values()
        ]
        busy = await codex.open_websocket_responses(
            body=_body(store=False), conversation_id="lc_1", **call
        )
        try:
            await codex.open_websocket_responses(
                body=_body(store=False, previous_response_id=latest),
                conversation_id="lc_1",
                previous_response_id=latest,
                connection_local=True,
                **call,
            )
        except codex.CodexContinuationUnavailable as error:
            reasons.append(error.reason)
        await _read(busy)
        return reasons

    assert _run(scenario()) == ["pool_unavailable", "latest_response_mismatch", "connection_busy"]


@pytest.mark.django_db
def test_a_pooled_socket_serves_only_its_owners_continuations(upstream):
    """Issue 34: even when the proxy knows nothing of a response id (its record lost to a
    FLUSHALL), another client key's connection-local continuation never finds the socket that
    produced it, and a socket is never handed to another owner under the same pool key."""

    async def scenario() -> tuple[list[str], str]:
        call = {"headers": _headers("tok-ws"), "account_id": "acct_ws"}
        stream = await codex.open_websocket_responses(
            body=_body(store=False), conversation_id="lc_a", owner="key_a", **call
        )
        await _read(stream)
        from proxy.clients.codex.ws_pool import websocket_pool

        [socket] = websocket_pool.get_or_create()._idle.values()
        owned = socket.latest_response_id
        reasons = []
        for conversation in ("lc_b", "lc_a"):
            try:
                await codex.open_websocket_responses(
                    body=_body(store=False, previous_response_id=owned),
                    conversation_id=conversation,
                    previous_response_id=owned,
                    connection_local=True,
                    owner="key_b",
                    **call,
                )
            except codex.CodexContinuationUnavailable as error:
                reasons.append(error.reason)
        # The owner's own continuation is served on that socket (the control).
        stream = await codex.open_websocket_responses(
            body=_body(store=False, previous_response_id=owned),
            conversation_id="lc_other_turn",
            previous_response_id=owned,
            connection_local=True,
            owner="key_a",
            **call,
        )
        await _read(stream)
        # Under the very same pool key another owner gets a socket of its own.
        stream = await codex.open_websocket_responses(
            body=_body(store=False), conversation_id="lc_a", owner="key_b", **call
        )
        await _read(stream)
        return reasons, owned

    reasons, owned = _run(scenario())

    assert reasons == ["pool_unavailable", "pool_unavailable"]
    sent = upstream.websocket_requests()
    assert [request.json().get("previous_response_id") for request in sent] == [None, owned, None]
    first, continued, other_owner = (request.extra["connection"] for request in sent)
    assert first == continued != other_owner
    assert upstream.ws_connections["tok-ws"] == 2


@pytest.mark.django_db
def test_a_lost_connection_local_socket_is_reported_not_replaced(upstream):
    async def scenario() -> str:
        call = {"headers": _headers("tok-ws"), "account_id": "acct_ws"}
        stream = await codex.open_websocket_responses(
            body=_body(store=False), conversation_id="lc_1", **call
        )
        await _read(stream)
        from proxy.clients.codex.ws_pool import websocket_pool

        [socket] = websocket_pool.get_or_create()._idle.values()
        await asyncio.to_thread(upstream.kill_websockets, "tok-ws")
        await asyncio.sleep(0.2)
        try:
            await codex.open_websocket_responses(
                body=_body(store=False, previous_response_id=socket.latest_response_id),
                conversation_id="lc_1",
                previous_response_id=socket.latest_response_id,
                connection_local=True,
                **call,
            )
        except codex.CodexContinuationUnavailable as error:
            return error.reason
        return "served"

    assert _run(scenario()) in ("reused_connection_lost", "pool_unavailable")
    assert upstream.ws_connections["tok-ws"] == 1  # never sent to another socket


@pytest.mark.django_db
def test_error_frames_are_typed_like_http_statuses(upstream):
    upstream.program(
        "tok-ws",
        Reply(kind="status", status=429, body={"error": {"code": "usage_limit_reached"}}),
    )

    async def scenario():
        try:
            await codex.open_websocket_responses(
                body=_body(),
                headers=_headers("tok-ws"),
                account_id="acct_ws",
                conversation_id="lc_1",
            )
        except codex.CodexHTTPError as error:
            return error.status, json.loads(error.body)["type"]

    assert _run(scenario()) == (429, "error")


@pytest.mark.parametrize("stream", [True, False])
def test_a_socket_that_breaks_before_any_output_falls_back_to_http_sse(
    proxy, upstream, client_key, stream
):
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    # response.created and response.in_progress, then the connection drops.
    upstream.program("tok-a", Reply(kind="cut", cut_after=2), Reply(text="over http"))
    upstream.program("tok-b", Reply(kind="cut", cut_after=2), Reply(text="over http"))

    response = post_responses(
        proxy, client_key, {"model": "gpt-5.4", "input": [], "stream": stream}
    )

    assert response.status_code == 200
    assert b"over http" in response.content
    assert [sent.method for sent in upstream.responses_requests()] == ["WS", "POST"]
    assert len(set(upstream.tokens_called())) == 1  # the same account
    proxy.drain()
    assert UsageRecord.objects.get().transport == "http_sse"
