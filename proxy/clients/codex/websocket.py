"""The responses call over the upstream WebSocket (spec §1.4 item 6, §1.8, §2.1, §2.3, §2.7).

``open_websocket_responses`` sends one ``{"type":"response.create", …body…}`` text frame on a
socket of the pool (``ws_pool``) and waits for the first event; it returns a
``CodexWebSocketStream``, which the request path reads exactly like the HTTP ``CodexStream``:
``chunks()`` gives each event re-framed as SSE (``event: <type>\\ndata: <raw json>\\n\\n``;
the internal ``codex.rate_limits`` and ``response.metadata`` are swallowed, what they say kept
in ``headers``), ``release()`` / ``close()`` end it (the socket goes back to the pool only after
``response.completed``).

Failures are the HTTP call's types: an error frame with a status is a ``CodexHTTPError``
whose body is the raw frame; a refused upgrade is the ``CodexHTTPError`` of its HTTP answer
(status, headers with ``Retry-After``, body, cookies: ``ws_handshake``), so a Cloudflare page
or a 429 at the upgrade is read exactly as over HTTP; either 5xx is asked again twice, on fresh
sockets. A socket that could not be opened, broke off or stayed silent is a
``CodexTransportError`` (the dispatch falls back to HTTP SSE for those); a connection-local
continuation that no socket can serve is ``CodexContinuationUnavailable``.

Timeouts: ``CODEX_WS_INITIAL_EVENT_TIMEOUT_SECONDS`` until the first event (a fresh socket
that stays silent is tried once more on another), ``CODEX_WS_IDLE_TIMEOUT_SECONDS`` between
later frames. A reused socket that dies before its first event is replaced by a fresh one
(stale reuse), unless the request needed that very socket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from django.conf import settings

from common import clock
from proxy import json_parse
from proxy.clients.codex.errors import (
    CodexContinuationUnavailable,
    CodexHTTPError,
    CodexTransportError,
)
from proxy.clients.codex.transport import SAME_ACCOUNT_5XX_RETRIES, TRANSPORT_ERRORS, responses_url
from proxy.clients.codex.ws_errors import error_frame_status, frame_headers
from proxy.clients.codex.ws_handshake import UpgradeRefused, websocket_session
from proxy.clients.codex.ws_pool import (
    Lease,
    UpstreamSocket,
    identity_of,
    pool_decision,
    websocket_pool,
)
from proxy.clients.codex.ws_reading import (
    ClosedCleanly,
    event_timeout,
    has_buffered_frames,
    next_event,
)

Headers = list[tuple[str, str]]
MAX_FRAME_BYTES = 64 * 1024 * 1024
# Not sent on the WebSocket opening (spec §2.3).
OPENING_OMITTED_HEADERS = frozenset({"content-type", "accept"})
TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
START_MS_FIELD = "x-codex-ws-stream-request-start-ms"


def websocket_url() -> str:
    url = responses_url()
    if url.startswith("https://"):
        return "wss://" + url.removeprefix("https://")
    return "ws://" + url.removeprefix("http://")


# The upgrade's own headers around the business headers, in the original's order (its
# ``CodexWebSocketConnection::responses``): Host (aiohttp's, first), these, the business
# headers, the extension offer last. aiohttp sets Sec-WebSocket-Key and -Extensions itself: a
# header already in the list keeps its place and takes aiohttp's value (the key is the
# placeholder's slot; the offer for ``compress=15`` is the same text).
_UPGRADE_HEADERS = (
    ("Connection", "Upgrade"),
    ("Upgrade", "websocket"),
    ("Sec-WebSocket-Version", "13"),
    ("Sec-WebSocket-Key", "set-by-aiohttp"),
)
_EXTENSIONS_OFFER = ("sec-websocket-extensions", "permessage-deflate; client_max_window_bits")


def opening_headers(headers: Headers) -> Headers:
    """The WebSocket opening's headers: the upgrade's, then the HTTP call's business headers
    without content-type and accept, then the extension offer (spec §2.3)."""
    business = [
        (name, value) for name, value in headers if name.lower() not in OPENING_OMITTED_HEADERS
    ]
    return [*_UPGRADE_HEADERS, *business, _EXTENSIONS_OFFER]


def response_create_frame(fields: dict[str, Any]) -> str:
    """The ``response.create`` frame of the body ``fields`` (left unchanged), with the
    request-start stamp in ``client_metadata`` (created when absent, a non-object left alone)."""
    frame = {"type": "response.create", **fields}
    metadata = fields.get("client_metadata")
    stamp = str(clock.now_ms())
    if metadata is None:
        frame["client_metadata"] = {START_MS_FIELD: stamp}
    elif isinstance(metadata, dict):
        frame["client_metadata"] = {**metadata, START_MS_FIELD: stamp}
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def _sse(kind: str, raw: str) -> tuple[bytes, bytes]:
    """The SSE frame of an event, and its data line's JSON (one line)."""
    if "\n" in raw or "\r" in raw:
        raw = json.dumps(json.loads(raw), ensure_ascii=False)
    data = raw.encode()
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n", data


class CodexWebSocketStream:
    """A response arriving over an upstream WebSocket; the ``CodexStream`` interface."""

    status = 200
    transport = "websocket"

    def __init__(self, lease: Lease, first: tuple[str, str], headers: dict[str, str]) -> None:
        assert lease.socket is not None
        self._lease = lease
        self._socket: UpstreamSocket = lease.socket
        self._pending: tuple[str, str] | None = first
        self.headers = headers
        self.reused = lease.reused
        self.pool_decision = dict(lease.decision)
        # The upgrade's cookies are reported by the socket's first response only.
        self.set_cookies = () if self.reused else self._socket.set_cookies
        self._completed = False
        self._ended = False
        # The (event type, data) of each event of the chunk ``chunks`` handed out last: what a
        # reader would scan the chunk for, known already.
        self.chunk_events: list[tuple[str, bytes]] = []

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each event as one SSE frame, up to and including the terminal event. Raises
        CodexTransportError when the socket breaks off, stays silent too long or sends a
        binary frame."""
        if self._pending is not None:
            kind, raw = self._pending
            self._pending = None
            # Ended before the yield: a reader may stop at the terminal event it was given.
            if kind in TERMINAL_EVENTS:
                self._end(kind, raw)
            frame, data = _sse(kind, raw)
            self.chunk_events = [(kind, data)]
            yield frame
        idle_timeout = event_timeout(idle=True)
        while not self._ended:
            parts: list[bytes] = []
            events: list[tuple[str, bytes]] = []
            stopped: Exception | None = None
            # One event awaited, then those already received with it: one chunk, as an HTTP
            # read returns the events that arrived together (fewer writes to the client).
            while not self._ended and (not parts or has_buffered_frames(self._socket)):
                try:
                    kind, raw = await next_event(
                        self._socket, self.headers, idle=True, timeout=idle_timeout
                    )
                except (ClosedCleanly, CodexTransportError) as error:
                    stopped = error
                    break
                if kind in TERMINAL_EVENTS:
                    self._end(kind, raw)
                frame, data = _sse(kind, raw)
                parts.append(frame)
                events.append((kind, data))
            if parts:
                self.chunk_events = events
                yield b"".join(parts)
            if isinstance(stopped, ClosedCleanly):
                # Like an HTTP body that ended: no error, no terminal event.
                self._ended = True
                return
            if stopped is not None:
                raise stopped

    def ended(self) -> bool:
        """Whether the response is over (its terminal event was read): nothing more to wait
        for."""
        return self._ended

    def _end(self, kind: str, raw: str) -> None:
        self._ended = True
        if kind != "response.completed":
            return
        try:
            response_id = json_parse.loads(raw)["response"]["id"]
        except (ValueError, KeyError, TypeError):
            response_id = None
        if not isinstance(response_id, str) or not response_id:
            raise CodexTransportError("response.completed without response.id")
        self._socket.latest_response_id = response_id
        self._completed = True

    def release(self) -> None:
        """The stream was read: after ``response.completed`` the socket returns to the pool,
        otherwise it is closed."""
        pool = websocket_pool.get_or_create()
        if self._completed:
            pool.give_back(self._lease)
        else:
            pool.drop(self._lease)

    def close(self) -> None:
        websocket_pool.get_or_create().drop(self._lease)


async def _connect(headers: Headers, account_id: str, *, pooled: bool) -> UpstreamSocket:
    """Open a socket. A refused upgrade is the ``CodexHTTPError`` the HTTP call would raise
    (its status, headers, body and cookies); no answer at all is a ``CodexTransportError``."""
    session = await websocket_session.get()
    try:
        websocket = await session.ws_connect(
            websocket_url(),
            headers=opening_headers(headers),
            compress=15,
            # Pooled sockets are pinged while they wait; one-shot sockets are not (§2.7).
            heartbeat=settings.CODEX_WS_PING_SECONDS if pooled else None,
            max_msg_size=MAX_FRAME_BYTES,
            autoping=True,
        )
    except UpgradeRefused as refused:
        raise CodexHTTPError(
            refused.status, refused.headers, refused.body, set_cookies=refused.set_cookies
        ) from None
    except aiohttp.WSServerHandshakeError as error:
        # A 101 whose handshake headers are wrong: no HTTP answer to read, a broken opening.
        raise CodexTransportError(f"websocket handshake invalid ({error.status})") from None
    except TRANSPORT_ERRORS as error:
        raise CodexTransportError(type(error).__name__) from None
    if pooled and hasattr(websocket, "_pong_heartbeat"):
        # aiohttp waits heartbeat/2 for the pong; the spec's budget is 5 s.
        websocket._pong_heartbeat = settings.CODEX_WS_PONG_TIMEOUT_SECONDS
    response = websocket._response
    return UpstreamSocket(
        websocket=websocket,
        account_id=account_id,
        headers={name.lower(): value for name, value in response.headers.items()},
        set_cookies=tuple(response.headers.getall("Set-Cookie", [])),
        identity=identity_of(headers),
    )


def _lease_for(
    *,
    identity: str,
    key_prefix: tuple[str, str],
    conversation_id: str,
    previous_response_id: str | None,
    connection_local: bool,
    account_id: str,
    owner: str | None,
) -> Lease:
    pool = websocket_pool.get_or_create()
    if not connection_local:
        return pool.lease((*key_prefix, conversation_id), account_id, identity, owner)
    key = pool.socket_for_response(key_prefix, previous_response_id or "", owner)
    if key is None:
        held = pool.held_by((*key_prefix, conversation_id), owner)
        if held == "leased":
            raise CodexContinuationUnavailable("connection_busy")
        if held == "idle":
            raise CodexContinuationUnavailable("latest_response_mismatch")
        raise CodexContinuationUnavailable("pool_unavailable")
    if pool.is_leased(key):
        raise CodexContinuationUnavailable("connection_busy")
    lease = pool.lease(key, account_id, owner=owner)
    if lease.socket is None:
        # The socket was found dead or expired when it was taken out.
        pool.drop(lease)
        raise CodexContinuationUnavailable("reused_connection_lost")
    return lease


async def _exchange(
    lease: Lease, frame_of: Callable[[], str], headers: Headers, *, connection_local: bool
) -> tuple[dict[str, str], tuple[str, str]]:
    """Send the frame on the lease's socket (opening one when it has none) and read the first
    event; returns (socket headers, first event). Stale reuse and a silent fresh socket are
    retried on a fresh socket."""
    pool = websocket_pool.get_or_create()
    fresh_silences = 0
    while True:
        fresh = lease.socket is None
        if lease.socket is None:
            lease.socket = await _connect(headers, lease.account_id, pooled=lease.pooled)
            pool.opened += 1
        socket = lease.socket
        stream_headers = dict(socket.headers)
        try:
            await socket.websocket.send_str(frame_of())
            first = await next_event(socket, stream_headers, idle=False)
        except (CodexTransportError, *TRANSPORT_ERRORS) as error:
            detail = getattr(error, "detail", type(error).__name__)
            if connection_local:
                pool.drop(lease)
                raise CodexContinuationUnavailable("reused_connection_lost") from None
            if not fresh:
                pool.forget_socket(lease)
                lease.decision = pool_decision("retry_after_stale_reuse")
                continue
            if "first-event timeout" in detail and fresh_silences == 0:
                fresh_silences += 1
                pool.forget_socket(lease)
                continue
            pool.drop(lease)
            raise CodexTransportError(detail) from None
        return stream_headers, first


def _without_cookies(frame: dict[str, Any], raw: str) -> bytes:
    """The raw frame (passed to the client as the upstream body), without any cookie the
    upstream wrapped in its ``headers``: those belong to the account."""
    headers = frame.get("headers")
    if not isinstance(headers, dict) or not any(
        isinstance(name, str) and "cookie" in name.lower() for name in headers
    ):
        return raw.encode()
    frame["headers"] = {
        name: value for name, value in headers.items() if "cookie" not in str(name).lower()
    }
    return json.dumps(frame, ensure_ascii=False).encode()


async def open_websocket_responses(
    *,
    body: dict[str, Any],
    headers: Headers,
    account_id: str,
    conversation_id: str,
    previous_response_id: str | None = None,
    connection_local: bool = False,
    owner: str | None = None,
) -> CodexWebSocketStream:
    """Send ``body`` (the fields of the HTTP call's JSON body) as a ``response.create`` frame
    and return the stream once its first event
    arrived. ``connection_local``: the request continues ``previous_response_id`` that only the
    socket which produced it knows (``store:false``) — and only a socket of ``owner`` (the
    client key) may be it. Raises CodexHTTPError, CodexTransportError,
    CodexContinuationUnavailable."""
    key_prefix = (settings.CODEX_UPSTREAM_BASE, account_id)
    # The Set-Cookie values of refused upgrades before the last try (HTTP keeps every answer's).
    refused_cookies: tuple[str, ...] = ()
    for try_number in range(SAME_ACCOUNT_5XX_RETRIES + 1):
        lease = _lease_for(
            identity=identity_of(headers),
            key_prefix=key_prefix,
            conversation_id=conversation_id,
            previous_response_id=previous_response_id,
            connection_local=connection_local,
            account_id=account_id,
            owner=owner,
        )
        try:
            stream_headers, (kind, raw) = await _exchange(
                lease,
                lambda: response_create_frame(body),
                headers,
                connection_local=connection_local,
            )
        except CodexHTTPError as refused:
            # The upgrade itself was answered with a status: read like the HTTP answer it is,
            # a 5xx asked again twice (on a fresh socket), anything else raised as it came.
            websocket_pool.get_or_create().drop(lease)
            refused_cookies += refused.set_cookies
            if refused.status >= 500 and try_number < SAME_ACCOUNT_5XX_RETRIES:
                continue
            raise CodexHTTPError(
                refused.status, refused.headers, refused.body, set_cookies=refused_cookies
            ) from None
        except BaseException:
            websocket_pool.get_or_create().drop(lease)
            raise
        status = error_frame_status(kind, raw)
        if status is None:
            stream = CodexWebSocketStream(lease, (kind, raw), stream_headers)
            stream.set_cookies = (*refused_cookies, *stream.set_cookies)
            return stream
        # An error frame: the socket is not reused after it (§2.7).
        set_cookies = lease.socket.set_cookies if lease.socket else ()
        websocket_pool.get_or_create().drop(lease)
        try:
            frame = json.loads(raw)
        except ValueError:
            frame = {}
        frame = frame if isinstance(frame, dict) else {}
        error_headers = {**stream_headers, **frame_headers(frame)}
        if status >= 500 and try_number < SAME_ACCOUNT_5XX_RETRIES and not connection_local:
            continue
        raise CodexHTTPError(
            status, error_headers, _without_cookies(frame, raw), set_cookies=set_cookies
        )
    raise AssertionError("unreachable")
