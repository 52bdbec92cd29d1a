"""Nothing upstream outlives its client (issue 34 item 5): a client that leaves while the proxy
holds the stream (after ``response.created``, before the first output) or while it reads a
non-stream answer closes the upstream socket or stream at once. The fake upstream stalls
after ``response.created`` for 30 s and notices the moment its caller goes away; the client
leaves from a raw socket as soon as the stall began.

Mirrors the original's ``dispatch/stream/lifecycle.rs`` behaviour (an attempt's upstream
stream belongs to the request: dropping the request drops it) and
``backend/tests/upstream/openai/transport/websocket_pool.rs::
codex_backend_client_should_discard_pooled_websocket_after_upstream_error`` (a socket that did
not complete its response is discarded, never pooled).
"""

from __future__ import annotations

import json
import socket
import time

import aiohttp
import pytest
import redis as redis_library
from django.conf import settings

from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account

TRANSPORTS = ["http_sse", "websocket"]
STALL_SECONDS = 30  # the upstream's answer would take this long: the test must not wait it out
PROMPTLY = 5  # how long the fake may take to see its caller leave


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _leave_once_the_upstream_stalls(proxy, key, path: str, body: dict, upstream, token: str):
    """Send the request from a raw socket, wait until the upstream began its stall (it sent
    ``response.created``), then close the socket: the client is gone."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
        f"Authorization: Bearer {key.key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    try:
        client.sendall(head + payload)
        assert _wait_for(lambda: token in upstream.stalls, 15), "the upstream never stalled"
        # Nothing was sent to the client yet: the proxy holds the stream until output.
        client.setblocking(False)
        try:
            received = client.recv(65536)
        except BlockingIOError:
            received = b""
        assert received == b""
    finally:
        client.close()


def _assert_the_upstream_was_left_at_once(upstream, token: str, transport: str) -> None:
    assert _wait_for(lambda: token in upstream.disconnects, PROMPTLY), (
        "the upstream kept answering a client that had left"
    )
    assert upstream.disconnects == [token]
    assert _wait_for(lambda: upstream.in_flight[token] == 0 and upstream.ws_open[token] == 0, 2)
    assert upstream.known_response_ids[token] == set()  # the answer was never completed
    # One attempt, never asked again over the other transport or on another account.
    [sent] = upstream.responses_requests()
    assert sent.method == ("WS" if transport == "websocket" else "POST")


def _assert_the_slot_is_free(account) -> None:
    client = redis_library.Redis.from_url(settings.REDIS_URL)
    slots = f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{account.id}"
    try:
        assert _wait_for(lambda: client.zcard(slots) == 0, 2)
    finally:
        client.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_leaving_while_the_stream_is_held_closes_the_upstream(
    proxy, upstream, client_key, transport
):
    account = make_pool_account("tok-a")
    # response.created and response.in_progress, then 30 s before the first output.
    upstream.program("tok-a", Reply(stall_after=2, stall_seconds=STALL_SECONDS))
    body = {"model": "gpt-5.4", "stream": True, "input": []}
    if transport == "http_sse":
        body["use_websocket"] = False

    _leave_once_the_upstream_stalls(proxy, client_key, "/v1/responses", body, upstream, "tok-a")

    _assert_the_upstream_was_left_at_once(upstream, "tok-a", transport)
    _assert_the_slot_is_free(account)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "gpt-5.4", "stream": False, "input": []}),
        (
            "/v1/chat/completions",
            {"model": "gpt-5.4", "stream": False, "messages": [{"role": "user", "content": "hi"}]},
        ),
    ],
    ids=["responses", "chat-completions"],
)
def test_a_client_leaving_during_a_non_stream_read_closes_the_upstream(
    proxy, upstream, client_key, settings, transport, path, body
):
    account = make_pool_account("tok-a")
    # The first output comes after 30 s: the non-stream read is still waiting for it.
    upstream.program("tok-a", Reply(stall_after=2, stall_seconds=STALL_SECONDS))
    # (Chat completions has no use_websocket field: the transport is the server's choice.)
    settings.CODEX_WS_ENABLED = transport == "websocket"

    _leave_once_the_upstream_stalls(proxy, client_key, path, body, upstream, "tok-a")

    _assert_the_upstream_was_left_at_once(upstream, "tok-a", transport)
    _assert_the_slot_is_free(account)


def test_a_client_websocket_leaving_while_the_stream_is_held_closes_the_upstream(
    proxy, upstream, client_key
):
    import asyncio

    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply(stall_after=2, stall_seconds=STALL_SECONDS))

    async def scenario() -> None:
        async with aiohttp.ClientSession() as session:
            socket_url = f"ws://127.0.0.1:{proxy.port}/v1/responses"
            headers = {"Authorization": f"Bearer {client_key.key}"}
            async with session.ws_connect(socket_url, headers=headers) as client:
                await client.send_str(
                    json.dumps({"type": "response.create", "model": "gpt-5.4", "input": []})
                )
                deadline = time.monotonic() + 15
                while "tok-a" not in upstream.stalls and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert "tok-a" in upstream.stalls

    asyncio.run(scenario())

    _assert_the_upstream_was_left_at_once(upstream, "tok-a", "websocket")
    _assert_the_slot_is_free(account)


def test_a_client_leaving_during_a_compact_read_closes_the_upstream(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    # Half of the compact JSON arrives, the rest only after 30 s.
    upstream.program("tok-a", Reply(stall_seconds=STALL_SECONDS))
    body = {"model": "gpt-5.4", "input": [{"role": "user", "content": "hi"}]}

    _leave_once_the_upstream_stalls(
        proxy, client_key, "/v1/responses/compact", body, upstream, "tok-a"
    )

    assert _wait_for(lambda: "tok-a" in upstream.disconnects, PROMPTLY)
    assert upstream.disconnects == ["tok-a"]
    assert len(upstream.server.requests_to("/codex/responses/compact")) == 1
    _assert_the_slot_is_free(account)
