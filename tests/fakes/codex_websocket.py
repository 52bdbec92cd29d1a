"""The fake Codex upstream's WebSocket side (spec §2.1 "Responses (WebSocket)", §2.7).

``GET /codex/responses`` with ``Upgrade: websocket``: after the handshake every text frame
``{"type":"response.create", …body…}`` is one request, answered by the next ``Reply``
programmed for the socket's token, each event one JSON text frame. Several requests may follow
on one socket. Faults match the HTTP side: ``status`` is an error frame
``{"type":"error","status":N,"error":{…},"headers":{…}}`` (or, with ``ws_handshake``, the
upgrade's own HTTP status), ``cut`` drops the TCP connection after ``cut_after`` events, ``eof``
closes the socket cleanly there, ``drop`` closes it without answering (at the handshake when
``ws_handshake``), ``first_byte_delay`` / ``delta_delay`` stall.

Each message is recorded like an HTTP request (method ``WS``, the upgrade's headers, as body
the frame without its ``type`` and without the ``x-codex-ws-stream-request-start-ms`` stamp —
the body the HTTP call would have sent —, ``extra["frame"]`` the frame as received,
``extra["connection"]`` the socket's number), so tests read what the proxy sent the same way
for both transports. Each socket remembers its latest
completed response id: ``store:false`` with another ``previous_response_id`` is answered
``previous_response_not_found`` (as the real backend does for a connection-local id).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import uuid
from typing import TYPE_CHECKING

from aiohttp import WSMessage, WSMsgType, web

from tests.fakes.http_server import RecordedRequest

if TYPE_CHECKING:
    from tests.fakes.codex import FakeCodexUpstream, Reply

_connection_numbers = itertools.count(1)


def error_frame(status: int, body, headers: dict[str, str]) -> dict:
    """The error frame standing for an HTTP error ``status`` with ``body``."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
    elif isinstance(body, dict):
        error = body
    else:
        error = {"message": str(body or "")}
    return {"type": "error", "status": status, "error": error, "headers": headers}


def _as_http_body(body: dict) -> dict:
    """The body as the HTTP call would have carried it: without the WebSocket's request-start
    stamp (and without the ``client_metadata`` that only held it)."""
    metadata = body.get("client_metadata")
    if not isinstance(metadata, dict) or "x-codex-ws-stream-request-start-ms" not in metadata:
        return body
    metadata = {k: v for k, v in metadata.items() if k != "x-codex-ws-stream-request-start-ms"}
    recorded = dict(body)
    if metadata:
        recorded["client_metadata"] = metadata
    else:
        del recorded["client_metadata"]
    return recorded


async def serve_websocket(fake: FakeCodexUpstream, request: web.Request) -> web.StreamResponse:
    token = fake._token(request)
    handshake = fake._handshake_reply(token)
    if handshake is not None:
        if handshake.kind == "drop":
            request.transport.close()
            raise asyncio.CancelledError
        from tests.fakes.codex import status_response

        with fake._lock:
            fake.ws_refused[token] += 1
        # The same answer as the HTTP side would give (a page as text/html, JSON as JSON).
        return status_response(handshake)
    # permessage-deflate is declined, as the HTTP side sends its SSE uncompressed: the fake
    # stands for the upstream's answers, not for its zlib (``compress_websocket`` turns it on).
    socket = web.WebSocketResponse(
        max_msg_size=64 * 1024 * 1024, autoping=True, compress=fake.compress_websocket
    )
    # Cookies (Cloudflare's) come with the upgrade: those of the next reply are set on it.
    for name, value in fake._peek_reply(token).headers.items():
        if name.lower() == "set-cookie":
            socket.headers.add("Set-Cookie", value)
    await socket.prepare(request)
    number = next(_connection_numbers)
    with fake._lock:
        fake.ws_connections[token] += 1
        fake.ws_open[token] += 1
        fake.ws_live[token].add(request.transport)
    headers = [
        (key.decode("latin-1"), value.decode("latin-1")) for key, value in request.raw_headers
    ]
    latest: str | None = None
    # A message that arrived while a request was being answered (read by the close watcher).
    pending: WSMessage | None = None
    try:
        while True:
            message = pending if pending is not None else await socket.receive()
            pending = None
            if message.type != WSMsgType.TEXT:
                break
            try:
                frame = json.loads(message.data)
            except ValueError:
                frame = None
            if not isinstance(frame, dict) or frame.get("type") != "response.create":
                refusal = error_frame(400, {"message": "expected response.create"}, {})
                await socket.send_json(refusal)
                continue
            body = {key: value for key, value in frame.items() if key != "type"}
            recorded_body = _as_http_body(body)
            fake.server.record(
                RecordedRequest(
                    method="WS",
                    path=request.path,
                    query=dict(request.query),
                    headers=headers,
                    body=json.dumps(recorded_body).encode(),
                    received_at=asyncio.get_running_loop().time(),
                    extra={"connection": number, "transport": "websocket", "frame": frame},
                )
            )
            previous = body.get("previous_response_id")
            if body.get("store") is False and previous and previous != latest:
                await socket.send_json(
                    error_frame(
                        400,
                        {
                            "type": "invalid_request_error",
                            "code": "previous_response_not_found",
                            "message": f"Previous response with id '{previous}' not found.",
                        },
                        {},
                    )
                )
                continue
            reply = fake._next_reply(token)
            with fake._lock:
                generation = fake._generation
                fake.in_flight[token] += 1
                fake.max_in_flight[token] = max(fake.max_in_flight[token], fake.in_flight[token])
            try:
                outcome, pending = await _answer_watching_for_close(
                    fake, request, socket, token, reply, body, generation
                )
            finally:
                with fake._lock:
                    if generation == fake._generation:
                        fake.in_flight[token] -= 1
            if outcome == "closed":
                break
            if outcome:
                latest = outcome
    finally:
        with fake._lock:
            fake.ws_open[token] -= 1
            fake.ws_live[token].discard(request.transport)
    return socket


async def _answer_watching_for_close(
    fake: FakeCodexUpstream,
    request: web.Request,
    socket: web.WebSocketResponse,
    token: str,
    reply: Reply,
    body: dict,
    generation: int,
) -> tuple[str | None, WSMessage | None]:
    """``_answer``, while the socket is read for the caller's close, as the real backend
    reads it: a caller that closes mid-answer stops the answer at once (``disconnects``).
    Returns the answer's outcome and a message that arrived meanwhile (answered next)."""
    answering = asyncio.ensure_future(
        _answer(fake, request, socket, token, reply, body, generation)
    )
    watching = asyncio.ensure_future(socket.receive())
    try:
        await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
        if answering.done():
            outcome = answering.result()
            if watching.done():
                # Read next by the main loop (a close arriving after the answer ends it there).
                return outcome, watching.result()
            return outcome, None
        message = watching.result()
        if message.type == WSMsgType.TEXT:
            # Another request before this one's end: answered after it, as a queue would.
            return await answering, message
        # The caller closed (or the connection broke) mid-answer: stop answering.
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await answering
        fake.note_disconnect(token, generation)
        return "closed", None
    finally:
        for task in (answering, watching):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await task


async def _answer(
    fake: FakeCodexUpstream,
    request: web.Request,
    socket: web.WebSocketResponse,
    token: str,
    reply: Reply,
    body: dict,
    generation: int,
) -> str | None:
    """Answer one request; returns the completed response id, "closed" when the socket is gone,
    or None."""
    from tests.fakes.codex import previous_response_not_found, reply_events

    if reply.first_byte_delay:
        await asyncio.sleep(reply.first_byte_delay)
    if reply.kind == "drop":
        request.transport.close()
        return "closed"
    if reply.kind == "status":
        await socket.send_json(error_frame(reply.status, reply.body, reply.headers))
        return None
    previous = body.get("previous_response_id")
    if reply.kind == "ok" and previous and not fake._knows(token, previous):
        # As over HTTP: an account knows only the response ids it produced.
        refusal = previous_response_not_found(previous)
        await socket.send_json(error_frame(400, refusal["error"], {}))
        return None
    model = reply.model or body.get("model") or "gpt-5.4"
    events = reply_events(reply, model)
    metadata = {
        "type": "response.metadata",
        "headers": {
            "x-request-id": f"upstream_{uuid.uuid4().hex[:12]}",
            "openai-model": model,
            **reply.headers,
        },
    }
    try:
        # The answer's headers travel in the internal response.metadata frame.
        await socket.send_str(json.dumps(metadata))
        for index, event in enumerate(events):
            if index and reply.delta_delay and event["type"].endswith(".delta"):
                await asyncio.sleep(reply.delta_delay)
            if reply.stall_seconds and index == reply.stall_after:
                # The caller's close is watched meanwhile (``_answer_watching_for_close``).
                await fake._stall_unless_gone(token, reply.stall_seconds)
            await socket.send_str(json.dumps(event))
        if reply.kind == "cut":
            await asyncio.sleep(0.05)
            request.transport.close()
            return "closed"
        if reply.kind == "eof":
            await socket.close()
            return "closed"
    except (ConnectionResetError, ConnectionError):
        # (A close the watcher saw cancels this answer; the watcher notes that one.)
        fake.note_disconnect(token, generation)
        raise
    if socket.closed:
        fake.note_disconnect(token, generation)
        return "closed"
    fake._remember(token, events)
    last = events[-1] if events else {}
    if last.get("type") == "response.completed":
        with contextlib.suppress(KeyError, TypeError):
            return last["response"]["id"]
    return None
