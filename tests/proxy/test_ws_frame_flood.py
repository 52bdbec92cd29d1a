"""Issue 35 item 3, against the real web process (``python -m config.run web``): the client
WebSocket holds at most one ``response.create`` waiting behind the one being answered, and its
frames are capped as ``/v1`` bodies are.

The attack of the review: a key with concurrency 1 queued 60 × 12 MiB frames on one socket in
3.4 s and took a worker from 567 MB to 1.14 GB — every frame was queued, and the key's policy
met only when a frame was dispatched. Here the same flood is refused frame by frame after the
first waiting one, and the worker's peak memory stays far below the 720 MiB it was sent.

The original (2.0.0) serves no client WebSocket, so no test of its is mirrored here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct

import aiohttp
import pytest
from django.conf import settings
from django.utils import timezone

from proxy.services.key_policies import PolicyValues, key_policy_set
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account
from tests.web_process import WebProcess

pytestmark = pytest.mark.subprocess

MIB = 1024 * 1024
FLOOD = 60


@pytest.fixture
def web(upstream, transactional_db, tmp_path):
    from proxy.services.fingerprints import fingerprint_ensure_current
    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())
    fingerprint_ensure_current(now=timezone.now())
    process = WebProcess(tmp_path, CODEX_UPSTREAM_BASE=upstream.url)
    yield process
    process.stop()


def _url(web: WebProcess) -> str:
    return web.url.replace("http://", "ws://") + "/v1/responses"


def _create(**fields) -> str:
    return json.dumps({"type": "response.create", "model": "gpt-5.4", "input": [], **fields})


async def _next_event(socket) -> dict:
    message = await socket.receive(timeout=60)
    assert message.type is aiohttp.WSMsgType.TEXT, message
    return json.loads(message.data)


def test_a_flood_of_frames_is_refused_after_the_one_waiting_and_memory_stays_bounded(
    web, upstream, client_key
):
    make_pool_account("tok-flood")
    # The first request streams for a minute: every frame of the flood arrives while it runs.
    upstream.program("tok-flood", Reply(deltas=600, delta_delay=0.1))
    key_policy_set(
        key=client_key, values=PolicyValues(max_concurrent_requests=1), now=timezone.now()
    )
    auth = {"Authorization": f"Bearer {client_key.key}"}
    large = _create(input=["x" * (12 * MIB)])
    resting = web.resident_bytes()

    async def scenario():
        refusals: list[dict] = []
        others: list[str] = []

        async def read(socket) -> None:
            while len(refusals) < FLOOD - 1:
                event = await _next_event(socket)
                if event["type"] == "error":
                    refusals.append(event)
                else:
                    others.append(event["type"])

        # Uncompressed: the worker takes in every byte of the 720 MiB.
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(_url(web), headers=auth, compress=0, max_msg_size=0) as socket,
        ):
            await socket.send_str(_create(input=["first"]))
            while (await _next_event(socket))["type"] != "response.created":
                pass
            reading = asyncio.create_task(read(socket))
            for _ in range(FLOOD):
                await socket.send_str(large)
            await asyncio.wait_for(reading, 120)
        return refusals, others

    refusals, others = asyncio.run(scenario())
    peak = web.peak_resident_bytes()

    # The first flood frame waits behind the running request; the other 59 are refused.
    assert len(refusals) == FLOOD - 1
    assert {(event["status"], event["error"]["code"]) for event in refusals} == {
        (429, "request_already_waiting")
    }
    assert "response.completed" not in others  # all refused while the first still ran
    assert peak - resting < 250 * MIB, f"peak {peak / MIB:.0f} MiB, resting {resting / MIB:.0f}"
    # Only the first request reached the upstream: the waiting one went with the socket.
    assert [request.json()["input"] for request in upstream.websocket_requests()] == [["first"]]


def test_a_frame_over_the_body_limit_is_refused_from_its_header(web, upstream, client_key):
    """The server's frame limit is the /v1 body limit (16 MiB): a frame whose header declares
    one byte more is refused — close 1009, message too big — before a byte of it is sent."""
    make_pool_account("tok-big")
    connection = socket.create_connection(("127.0.0.1", web.port), timeout=30)
    connection.sendall(
        (
            f"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{web.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {client_key.key}\r\n\r\n"
        ).encode()
    )
    handshake = b""
    while b"\r\n\r\n" not in handshake:
        handshake += connection.recv(4096)
    # A masked text frame's header: FIN + text, 64-bit length, the mask; no payload follows.
    length = settings.V1_MAX_BODY_BYTES + 1
    connection.sendall(bytes([0x81, 0x80 | 127]) + struct.pack("!Q", length) + os.urandom(4))
    answer = handshake.split(b"\r\n\r\n", 1)[1]
    while len(answer) < 4:
        answer += connection.recv(4096)
    connection.close()

    assert handshake.startswith(b"HTTP/1.1 101")
    assert answer[0] == 0x88  # FIN + close
    assert struct.unpack("!H", answer[2:4])[0] == 1009
    assert upstream.responses_requests() == []
