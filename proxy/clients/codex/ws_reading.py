"""Reading the upstream WebSocket (spec §2.7): the next event frame with its timeouts, internal
events folded into the stream's headers, and what aiohttp already holds.

``proxy.clients.codex.websocket`` builds the responses call on these.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from django.conf import settings

from proxy.clients.codex.errors import CodexTransportError
from proxy.clients.codex.transport import TRANSPORT_ERRORS
from proxy.clients.codex.ws_errors import frame_headers, rate_limit_headers
from proxy.clients.codex.ws_pool import UpstreamSocket

INTERNAL_EVENTS = frozenset({"codex.rate_limits", "response.metadata"})


def event_type(raw: str) -> tuple[str | None, dict[str, Any] | None]:
    """The frame's ``type`` (cheaply when it comes first, compact or with a space after the
    colon) and, when it had to be parsed, the parsed frame."""
    if raw.startswith('{"type":'):
        start = 10 if raw.startswith(" ", 8) else 9
        if raw.startswith('"', start - 1):
            end = raw.find('"', start)
            # A type with an escape in it is read by the parser.
            if end > start and "\\" not in raw[start:end]:
                return raw[start:end], None
    try:
        event = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(event, dict):
        return None, None
    kind = event.get("type")
    return (kind if isinstance(kind, str) else None), event


def has_buffered_frames(socket: UpstreamSocket) -> bool:
    """Whether aiohttp already holds a received frame for this socket (reading it will not
    wait). aiohttp has no public peek; without one every event is its own chunk."""
    buffer = getattr(getattr(socket.websocket, "_reader", None), "_buffer", None)
    return bool(buffer)


def next_frame_is_buffered_text(socket: UpstreamSocket) -> bool:
    """Whether the frame aiohttp hands out next is a text frame it already holds."""
    buffer = getattr(getattr(socket.websocket, "_reader", None), "_buffer", None)
    if not buffer:
        return False
    message = buffer[0][0]
    return getattr(message, "type", None) is aiohttp.WSMsgType.TEXT


_ABNORMAL_CLOSURE = 1006  # RFC 6455: the connection ended without a close frame


def closed_with_a_close_frame(socket: UpstreamSocket, message: aiohttp.WSMessage) -> bool:
    """The upstream sent a close frame — the clean end an HTTP EOF is — however aiohttp
    reports it: CLOSE, or CLOSING/CLOSED once it has answered the frame itself (then the
    socket's close code is the upstream's). A connection that just broke is CLOSED with
    1006 (or no code)."""
    if message.type is aiohttp.WSMsgType.CLOSE:
        return True
    if message.type not in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
        return False
    return socket.websocket.close_code not in (None, _ABNORMAL_CLOSURE)


class ClosedCleanly(Exception):
    """The upstream closed the socket with a close frame (after the first event)."""


def event_timeout(*, idle: bool) -> float:
    """How long the next frame may take: between frames, or (``idle`` False) until the first
    event; 0 disables the first-event timeout and the between-frames one applies then."""
    first_timeout = settings.CODEX_WS_INITIAL_EVENT_TIMEOUT_SECONDS
    return settings.CODEX_WS_IDLE_TIMEOUT_SECONDS if idle or not first_timeout else first_timeout


async def next_event(
    socket: UpstreamSocket, headers: dict[str, str], *, idle: bool, timeout: float | None = None
) -> tuple[str, str]:
    """The next event frame (type, raw JSON), internal events folded into ``headers``.
    ``timeout``: the wait allowed (``event_timeout``, computed when not given)."""
    if timeout is None:
        timeout = event_timeout(idle=idle)
    while True:
        try:
            if next_frame_is_buffered_text(socket):
                # Already received: read at once, without a timer to arm and cancel (most of
                # a response's frames arrive together with another). Only a text frame: after
                # a ping aiohttp would go on to wait for the next frame itself.
                message = await socket.websocket.receive()
            else:
                async with asyncio.timeout(timeout):
                    message = await socket.websocket.receive()
        except TimeoutError:
            raise CodexTransportError(
                "websocket idle timeout" if idle else "websocket first-event timeout"
            ) from None
        except TRANSPORT_ERRORS as error:
            raise CodexTransportError(type(error).__name__) from None
        if message.type is aiohttp.WSMsgType.BINARY:
            raise CodexTransportError("binary websocket frame")
        if idle and closed_with_a_close_frame(socket, message):
            raise ClosedCleanly
        if message.type is not aiohttp.WSMsgType.TEXT:
            raise CodexTransportError("websocket closed")
        raw = message.data
        kind, event = event_type(raw)
        if kind is None:
            raise CodexTransportError("websocket frame without a type")
        if kind in INTERNAL_EVENTS:
            event = event if event is not None else json.loads(raw)
            if kind == "codex.rate_limits":
                headers.update(rate_limit_headers(event))
            else:
                headers.update(frame_headers(event))
            continue
        return kind, raw
