"""A fake ChatGPT Codex upstream: real HTTP, real SSE framing, programmable faults per token.

Serves ``POST /codex/responses`` (Responses SSE), the same path as a WebSocket
(``tests/fakes/codex_websocket.py``: ``response.create`` frames, the same faults),
``POST /codex/responses/compact`` (JSON; a reply's ``first_byte_delay`` delays it, and it
counts in ``in_flight`` like a stream),
``GET /codex/models`` and the usage endpoint, at the root and under ``/backend-api`` (the
production base ends in ``/backend-api``, where usage lives at ``/wham/usage``). Each request
is answered by the next ``Reply`` programmed for its access token (``fake.program(token,
Reply(...), ...)``); with nothing programmed, a normal streamed success. Every request is
recorded with its headers in arrival order, and the fake tracks how many requests per token are
in flight at once and whether a client went away mid-stream.

Like the real backend (with ``store``), an account only knows the response ids it produced:
a ``previous_response_id`` another token produced, or none produced, is answered 400
``previous_response_not_found`` (``known_response_ids`` per token; a programmed non-"ok"
reply is answered as programmed).

Used by the tests and by bench/ (``python -m tests.fakes.codex --port N``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.http_server import LocalHTTPServer

CLOUDFLARE_CHALLENGE_PAGE = (
    "<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>"
    '<div id="cf-chl-widget"></div><script src="/cdn-cgi/challenge-platform/h/b/orchestrate/'
    'chl_page/v1?ray=8f1c"></script><noscript>Enable JavaScript and cookies to continue'
    "</noscript></body></html>"
)


@dataclass
class Reply:
    """What the fake answers to one request.

    kind:
      "ok"      a streamed success (``text`` split into ``deltas`` deltas), or ``events`` as given
      "status"  an HTTP error: ``status`` with ``body`` (str/dict) and ``headers``
      "cut"     stream ``cut_after`` events of a success, then drop the connection
      "eof"     stream ``cut_after`` events, then end the body cleanly without a terminal event
      "failed"  stream response.created then a ``response.failed`` with ``code``/``message``
      "drop"    close the connection without answering at all

    ``stall_seconds``: after ``stall_after`` events, wait that long before the rest (a model
    thinking before its first output); a caller that goes away meanwhile is noticed at once
    (``disconnects``), as the real backend stops generating for a closed stream.
    """

    kind: str = "ok"
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    text: str = "Hello from the fake upstream."
    deltas: int = 4
    events: list[dict] | None = None
    cut_after: int = 3
    code: str = "server_error"
    message: str = "Something went wrong upstream."
    first_byte_delay: float = 0.0
    delta_delay: float = 0.0
    usage: dict | None = None
    model: str | None = None
    # "ok" only: the whole SSE body sent compressed with this content coding (gzip, br, zstd).
    content_encoding: str | None = None
    # WebSocket only: answer at the upgrade ("status": that HTTP status instead of 101,
    # "drop": the connection closed) rather than to a response.create frame.
    ws_handshake: bool = False
    stall_after: int = 0
    stall_seconds: float = 0.0


def status_response(reply: Reply) -> web.Response:
    """The HTTP error answer of a "status" reply: JSON for a dict or list body, else text
    (``text/html`` when it is a page, as Cloudflare's is). The same over HTTP and at a
    WebSocket upgrade."""
    body = reply.body if reply.body is not None else ""
    if isinstance(body, dict | list):
        return web.json_response(body, status=reply.status, headers=reply.headers)
    content_type = "text/html" if "<html" in body.lower() else "text/plain"
    return web.Response(
        status=reply.status, text=body, headers=reply.headers, content_type=content_type
    )


def _compressed(body: bytes, coding: str) -> bytes:
    if coding == "gzip":
        import gzip

        return gzip.compress(body)
    if coding == "deflate":
        import zlib

        return zlib.compress(body)
    if coding == "br":
        import brotli

        return brotli.compress(body)
    if coding == "zstd":
        from backports import zstd

        return zstd.compress(body)
    raise ValueError(f"the fake cannot compress with {coding!r}")


def usage_object(
    input_tokens: int = 12, output_tokens: int = 5, cached: int = 4, reasoning: int = 2
) -> dict:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    *, response_id: str, model: str, status: str, output: list, usage: dict | None, **extra
) -> dict:
    body = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    body.update(extra)
    return body


def text_events(*, text: str, deltas: int, model: str, usage: dict | None = None) -> list[dict]:
    """The event sequence of a streamed text answer, as the Responses API sends it."""
    response_id = f"resp_{uuid.uuid4().hex}"
    item_id = f"msg_{uuid.uuid4().hex}"
    size = max(1, -(-len(text) // max(1, deltas)))
    pieces = [text[index : index + size] for index in range(0, len(text), size)] or [""]
    message = {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    in_progress = response_object(
        response_id=response_id, model=model, status="in_progress", output=[], usage=None
    )
    events: list[dict] = [
        {"type": "response.created", "response": in_progress},
        {"type": "response.in_progress", "response": in_progress},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
    ]
    for piece in pieces:
        events.append(
            {
                "type": "response.output_text.delta",
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
        )
    events += [
        {
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": text, "annotations": []},
        },
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {
            "type": "response.completed",
            "response": response_object(
                response_id=response_id,
                model=model,
                status="completed",
                output=[message],
                usage=usage if usage is not None else usage_object(),
            ),
        },
    ]
    return number_events(events)


def function_call_events(
    *, name: str, arguments: str, model: str, call_id: str | None = None
) -> list[dict]:
    """The event sequence of a response that calls one function."""
    response_id = f"resp_{uuid.uuid4().hex}"
    item_id = f"fc_{uuid.uuid4().hex}"
    call_id = call_id or f"call_{uuid.uuid4().hex[:24]}"
    item = {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    in_progress = response_object(
        response_id=response_id, model=model, status="in_progress", output=[], usage=None
    )
    half = len(arguments) // 2
    events = [
        {"type": "response.created", "response": in_progress},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "arguments": ""},
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": 0,
            "delta": arguments[:half],
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": 0,
            "delta": arguments[half:],
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": item_id,
            "output_index": 0,
            "arguments": arguments,
            "name": name,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": response_object(
                response_id=response_id,
                model=model,
                status="completed",
                output=[item],
                usage=usage_object(),
            ),
        },
    ]
    return number_events(events)


def previous_response_not_found(response_id: str) -> dict:
    """The backend's 400 body for a previous response id this account does not know."""
    return {
        "error": {
            "message": f"Previous response with id '{response_id}' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


def reply_events(reply: Reply, model: str) -> list[dict]:
    """The events a programmed reply sends (HTTP SSE and WebSocket alike): the text answer,
    or its ``response.created`` then ``response.failed``, or cut after ``cut_after``."""
    events = reply.events or text_events(
        text=reply.text, deltas=reply.deltas, model=model, usage=reply.usage
    )
    if reply.kind == "failed":
        failed = response_object(
            response_id=events[0]["response"]["id"],
            model=model,
            status="failed",
            output=[],
            usage=None,
            error={"code": reply.code, "message": reply.message},
        )
        return number_events([events[0], {"type": "response.failed", "response": failed}])
    if reply.kind in ("cut", "eof"):
        return events[: reply.cut_after]
    return events


def number_events(events: list[dict]) -> list[dict]:
    return [{**event, "sequence_number": index} for index, event in enumerate(events)]


def sse_frame(event: dict) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class FakeCodexUpstream:
    """The fake's state; ``server`` is the LocalHTTPServer serving it."""

    def __init__(self, *, port: int = 0, record: bool = True) -> None:
        self._lock = threading.Lock()
        self._programs: dict[str, deque[Reply]] = defaultdict(deque)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.max_in_flight: dict[str, int] = defaultdict(int)
        self.disconnects: list[str] = []
        # Raised by reset(): a request that began before it (an earlier test's, still waiting
        # out its delay) leaves nothing in the counters the next test reads.
        self._generation = 0
        self.models_payload: dict | None = None
        # token -> models payload, when plans differ
        self.models_by_token: dict[str, dict] = {}
        self.models_headers: dict[str, str] = {}
        # token -> how GET /codex/models fails: an HTTP status (int) or a non-JSON body (str)
        self.models_failures: dict[str, int | str] = {}
        # seconds GET /codex/models waits before answering (a job that takes a while)
        self.models_delay = 0.0
        # seconds the usage endpoint waits before answering (a hung upstream)
        self.usage_delay = 0.0
        self.compact_payload: dict | None = None
        # token -> usage payload (dict) or an HTTP status (int) for the usage endpoints
        self.usage: dict[str, dict | int] = {}
        # usage paths answering 404 as if they did not exist (e.g. "/backend-api/wham/usage")
        self.usage_paths_missing: set[str] = set()
        self.default_deltas = self.DEFAULT_DELTAS
        # The answer to tokens with nothing programmed (None: a normal streamed success).
        self.default_reply: Reply | None = None
        # token -> the response ids it completed (what a previous_response_id may name)
        self.known_response_ids: dict[str, set[str]] = defaultdict(set)
        # WebSocket: sockets opened per token in all, and open now.
        self.ws_connections: dict[str, int] = defaultdict(int)
        self.ws_open: dict[str, int] = defaultdict(int)
        self.ws_live: dict[str, set] = defaultdict(set)  # token -> the open sockets' transports
        # WebSocket upgrades answered with an HTTP status instead of 101, per token.
        self.ws_refused: dict[str, int] = defaultdict(int)
        # The tokens whose answer reached a programmed stall, in order (the stall began).
        self.stalls: list[str] = []
        # Whether the WebSocket side accepts permessage-deflate.
        self.compress_websocket = False
        self.server = LocalHTTPServer(self._application, port=port, record=record)

    # -- control (from the test thread)

    def program(self, token: str, *replies: Reply) -> None:
        with self._lock:
            self._programs[token].extend(replies)

    def note_disconnect(self, token: str, generation: int) -> None:
        """Record that ``token``'s caller went away, unless its request began before the last
        reset (an earlier test's)."""
        with self._lock:
            if generation == self._generation:
                self.disconnects.append(token)

    def reset(self) -> None:
        with self._lock:
            self._generation += 1
            self._programs.clear()
            self.in_flight.clear()
            self.max_in_flight.clear()
            self.disconnects.clear()
            self.usage.clear()
            self.usage_paths_missing.clear()
            self.models_by_token.clear()
            self.models_failures.clear()
            self.models_payload = None
            self.models_delay = 0.0
            self.usage_delay = 0.0
            self.models_headers = {}
            self.compact_payload = None
            self.default_deltas = self.DEFAULT_DELTAS
            self.default_reply = None
            self.known_response_ids.clear()
            self.ws_connections.clear()
            self.ws_open.clear()
            self.ws_live.clear()
            self.ws_refused.clear()
            self.stalls.clear()
        self.server.clear()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def requests(self):
        return self.server.requests

    def responses_requests(self):
        return self.server.requests_to("/codex/responses")

    def websocket_requests(self):
        """The ``response.create`` messages received over WebSockets, in arrival order."""
        return [request for request in self.responses_requests() if request.method == "WS"]

    def kill_websockets(self, token: str) -> None:
        """Drop every open WebSocket of ``token`` (no close frame: a connection that died)."""

        async def kill() -> None:
            with self._lock:
                transports = list(self.ws_live[token])
            for transport in transports:
                transport.abort()

        self.server.run_in_loop(kill())

    def http_requests(self):
        """The ``POST /codex/responses`` requests (HTTP SSE), in arrival order."""
        return [request for request in self.responses_requests() if request.method == "POST"]

    def tokens_called(self) -> list[str]:
        return [
            (request.header("authorization") or "").removeprefix("Bearer ")
            for request in self.responses_requests()
        ]

    def start(self) -> FakeCodexUpstream:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    # -- serving (on the server's loop)

    DEFAULT_DELTAS = 4

    def _next_reply(self, token: str) -> Reply:
        with self._lock:
            queue = self._programs.get(token)
            if queue:
                return queue.popleft()
            return self.default_reply or Reply(deltas=self.default_deltas)

    def _peek_reply(self, token: str) -> Reply:
        """The reply the next request of ``token`` will get (left in place)."""
        with self._lock:
            queue = self._programs.get(token)
            if queue:
                return queue[0]
            return self.default_reply or Reply(deltas=self.default_deltas)

    def _handshake_reply(self, token: str) -> Reply | None:
        """The next programmed reply when it is meant for the WebSocket upgrade itself."""
        with self._lock:
            queue = self._programs.get(token)
            if queue and queue[0].ws_handshake:
                return queue.popleft()
            return None

    def _application(self, server: LocalHTTPServer) -> web.Application:
        application = web.Application(client_max_size=64 * 1024 * 1024)
        # The Codex paths at the root and under /backend-api, the production layout, so that a
        # test can point the base at either (spec §2.1: the usage URLs depend on it).
        for base in ("", "/backend-api"):
            application.router.add_post(f"{base}/codex/responses", self._responses)
            application.router.add_get(f"{base}/codex/responses", self._responses_websocket)
            application.router.add_post(f"{base}/codex/responses/compact", self._compact)
            application.router.add_get(f"{base}/codex/models", self._models)
            application.router.add_get(f"{base}/codex/usage", self._usage)
        application.router.add_get("/backend-api/wham/usage", self._usage)
        # OpenAI-style paths, so benchmarks can call the fake directly or through other proxies.
        application.router.add_post("/v1/responses", self._responses)
        application.router.add_post("/v1/chat/completions", self._chat_completions)
        return application

    def _knows(self, token: str, response_id: str) -> bool:
        with self._lock:
            return response_id in self.known_response_ids[token]

    def _remember(self, token: str, events: list[dict]) -> None:
        for event in events:
            response = event.get("response")
            if event.get("type") == "response.completed" and isinstance(response, dict):
                with self._lock:
                    self.known_response_ids[token].add(response["id"])

    def _token(self, request: web.Request) -> str:
        return request.headers.get("Authorization", "").removeprefix("Bearer ")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        token = self._token(request)
        reply = self._next_reply(token)
        with self._lock:
            generation = self._generation
            self.in_flight[token] += 1
            self.max_in_flight[token] = max(self.max_in_flight[token], self.in_flight[token])
        try:
            return await self._answer(request, token, reply, generation)
        finally:
            with self._lock:
                if generation == self._generation:
                    self.in_flight[token] -= 1

    async def _responses_websocket(self, request: web.Request) -> web.StreamResponse:
        from tests.fakes.codex_websocket import serve_websocket

        return await serve_websocket(self, request)

    async def _answer(
        self, request: web.Request, token: str, reply: Reply, generation: int
    ) -> web.StreamResponse:
        if reply.first_byte_delay:
            await asyncio.sleep(reply.first_byte_delay)
        if reply.kind == "drop":
            request.transport.close()
            raise asyncio.CancelledError
        if reply.kind == "status":
            return status_response(reply)
        body = await request.json()
        model = reply.model or body.get("model") or "gpt-5.4"
        previous = body.get("previous_response_id")
        if reply.kind == "ok" and previous and not self._knows(token, previous):
            return web.json_response(previous_response_not_found(previous), status=400)
        events = reply_events(reply, model)
        if reply.content_encoding:
            if reply.kind == "ok":
                self._remember(token, events)
            body = b"".join(sse_frame(event) for event in events)
            return web.Response(
                body=_compressed(body, reply.content_encoding),
                headers={
                    "Content-Type": "text/event-stream",
                    "Content-Encoding": reply.content_encoding,
                    "openai-model": model,
                    **reply.headers,
                },
            )
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "x-request-id": f"upstream_{uuid.uuid4().hex[:12]}",
                "openai-model": model,
                **reply.headers,
            },
        )
        await response.prepare(request)
        try:
            for index, event in enumerate(events):
                if index and reply.delta_delay and event["type"].endswith(".delta"):
                    await asyncio.sleep(reply.delta_delay)
                if (
                    reply.stall_seconds
                    and index == reply.stall_after
                    and not await self._stall_unless_gone(token, reply.stall_seconds, request)
                ):
                    raise ConnectionResetError("the caller left during the stall")
                await response.write(sse_frame(event))
            if reply.kind == "cut":
                # Let the events reach the client, then drop the connection mid-stream (no
                # terminating chunk). Without the pause aiohttp may discard the last packet.
                await asyncio.sleep(0.05)
                request.transport.close()
                return response
            await response.write_eof()
            if reply.kind == "ok":
                self._remember(token, events)
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            self.note_disconnect(token, generation)
            raise
        return response

    async def _stall_unless_gone(
        self, token: str, seconds: float, request: web.Request | None = None
    ) -> bool:
        """Wait ``seconds`` (a stall); False as soon as the HTTP caller of ``request`` went
        away (its connection closed). A WebSocket's close is watched by its handler."""
        with self._lock:
            self.stalls.append(token)
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline:
            if request is not None and (
                request.transport is None or request.transport.is_closing()
            ):
                return False
            await asyncio.sleep(0.02)
        return True

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        """A Chat Completions answer (stream or not) with the same text as a Responses reply."""
        reply = self._next_reply(self._token(request))
        body = await request.json()
        model = body.get("model") or "gpt-5.4"
        text = reply.text
        size = max(1, -(-len(text) // max(1, reply.deltas)))
        pieces = [text[index : index + size] for index in range(0, len(text), size)]
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        await response.write(chunk({"role": "assistant", "content": ""}))
        for piece in pieces:
            await response.write(chunk({"content": piece}))
        await response.write(chunk({}, "stop"))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _compact(self, request: web.Request) -> web.Response:
        token = self._token(request)
        reply = self._next_reply(token)
        with self._lock:
            generation = self._generation
            self.in_flight[token] += 1
            self.max_in_flight[token] = max(self.max_in_flight[token], self.in_flight[token])
        try:
            if reply.first_byte_delay:  # a compaction that takes its time
                await asyncio.sleep(reply.first_byte_delay)
            return await self._compact_answer(request, token, reply)
        finally:
            with self._lock:
                if generation == self._generation:
                    self.in_flight[token] -= 1

    async def _compact_answer(self, request: web.Request, token: str, reply: Reply) -> web.Response:
        if reply.kind == "status":
            body = reply.body if reply.body is not None else ""
            if isinstance(body, dict | list):
                return web.json_response(body, status=reply.status, headers=reply.headers)
            return web.Response(status=reply.status, text=body, headers=reply.headers)
        previous = (await request.json()).get("previous_response_id")
        if reply.kind == "ok" and previous and not self._knows(token, previous):
            # As on /codex/responses: an account knows only the response ids it produced.
            return web.json_response(previous_response_not_found(previous), status=400)
        payload = self.compact_payload or {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response.compaction",
            "output": [{"type": "compaction", "encrypted_content": "gAAAA-compacted"}],
            "usage": usage_object(),
        }
        if not reply.stall_seconds:
            return web.json_response(payload, headers=reply.headers)
        # Half the JSON, the stall, the rest: a caller leaving mid-body is seen at once.
        encoded = json.dumps(payload).encode()
        with self._lock:
            generation = self._generation
        response = web.StreamResponse(headers={"Content-Type": "application/json", **reply.headers})
        response.content_length = len(encoded)
        await response.prepare(request)
        await response.write(encoded[: len(encoded) // 2])
        if not await self._stall_unless_gone(token, reply.stall_seconds, request):
            self.note_disconnect(token, generation)
            raise ConnectionResetError("the caller left during the stall")
        await response.write(encoded[len(encoded) // 2 :])
        await response.write_eof()
        return response

    async def _usage(self, request: web.Request) -> web.Response:
        if self.usage_delay:
            await asyncio.sleep(self.usage_delay)
        if request.path in self.usage_paths_missing:
            return web.json_response({"detail": "Not Found"}, status=404)
        answer = self.usage.get(self._token(request), 404)
        if isinstance(answer, int):
            return web.json_response({"detail": "no usage"}, status=answer)
        return web.json_response(answer)

    async def _models(self, request: web.Request) -> web.Response:
        if self.models_delay:
            await asyncio.sleep(self.models_delay)
        failure = self.models_failures.get(self._token(request))
        if isinstance(failure, int):
            return web.json_response({"detail": "models unavailable"}, status=failure)
        if isinstance(failure, str):
            return web.Response(text=failure, content_type="text/html")
        payload = (
            self.models_by_token.get(self._token(request)) or self.models_payload or {"models": []}
        )
        return web.json_response(payload, headers=self.models_headers)


def main() -> None:
    """Serve the fake in the foreground (used by bench/)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--deltas", type=int, default=20)
    arguments = parser.parse_args()
    fake = FakeCodexUpstream(port=arguments.port, record=False)
    fake.default_deltas = arguments.deltas
    fake.start()
    print(fake.url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
