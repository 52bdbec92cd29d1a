"""The web process's HTTP/1.1 protocol: uvicorn's httptools protocol with the connection and
header limits uvicorn does not have, so that the web process is safe without a reverse proxy
in front of it.

uvicorn (0.55) bounds only the idle time between two requests of a keep-alive connection
(``timeout_keep_alive``): a connection that never finishes its headers stays open for ever,
httptools buffers a header of any size, and ``limit_concurrency`` answers 503 only once a
request's headers are in — an idle socket still holds its file descriptor. This subclass adds,
per worker process:

- ``WEB_HEADER_TIMEOUT_SECONDS``: the request line and headers must be in within this long of
  the connection's start (or of the first byte of the next request on a keep-alive
  connection); else the connection is closed (408 when part of a request had arrived);
- ``WEB_MAX_HEADER_BYTES``: the request line and headers together; beyond, 431 and close, as
  soon as the buffered part passes it (a header dripped for ever is cut at the cap);
- ``WEB_MAX_HEADER_FIELD_BYTES``: one header line (name and value); beyond, 431 and close;
- ``WEB_BODY_IDLE_TIMEOUT_SECONDS``: a request body that stops arriving (nothing for this long
  while the application waits for it) has its connection closed — the application sees the
  client leave. Checked by one sweep a second over the requests whose bodies are being read;
- ``WEB_MAX_CONNECTIONS_PER_WORKER``: open connections (WebSockets included). At the cap a new
  connection first takes the place of the connection that has waited longest for a request
  (still sending its headers, or idle between two requests): a flood of idle sockets cannot
  lock real clients out. When every connection has a request in progress, the new one is
  answered 503 and closed at once, so its file descriptor is freed.

Per request this costs a length check per data chunk and per header line; the timer is created
only when a request's headers do not arrive in one chunk (and once per connection).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger("uvicorn.error")

# How often the requests whose bodies are being read are checked for a stalled body.
_BODY_SWEEP_INTERVAL_SECONDS = 1.0
# A refused connection is logged at most this often per worker: a flood must not flood the log.
_REFUSAL_LOG_INTERVAL_SECONDS = 10.0


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_seconds: float
    max_header_bytes: int
    max_header_field_bytes: int
    body_idle_timeout_seconds: float
    max_connections: int


@functools.cache
def connection_limits() -> ConnectionLimits:
    """The limits of this worker, read once from Django's settings (set up by config.asgi)."""
    from django.conf import settings

    return ConnectionLimits(
        header_timeout_seconds=settings.WEB_HEADER_TIMEOUT_SECONDS,
        max_header_bytes=settings.WEB_MAX_HEADER_BYTES,
        max_header_field_bytes=settings.WEB_MAX_HEADER_FIELD_BYTES,
        body_idle_timeout_seconds=settings.WEB_BODY_IDLE_TIMEOUT_SECONDS,
        max_connections=settings.WEB_MAX_CONNECTIONS_PER_WORKER,
    )


class HeaderFieldTooLarge(Exception):
    """Raised from the parser's header callback: a header line, or the lines so far, over
    their cap."""


def _plain_response(status: int, reason: str, message: str) -> bytes:
    body = message.encode("ascii")
    return b"".join(
        [
            f"HTTP/1.1 {status} {reason}\r\n".encode("ascii"),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        ]
    )


HEADERS_TOO_LARGE = _plain_response(
    431, "Request Header Fields Too Large", "Request header fields too large."
)
HEADERS_TIMED_OUT = _plain_response(408, "Request Timeout", "Request headers not received in time.")
TOO_MANY_CONNECTIONS = _plain_response(
    503, "Service Unavailable", "Too many connections; try again shortly."
)


class _RefusalLog:
    """Counts refusals of one kind and logs them at most once per interval."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.logged_at = float("-inf")

    def note(self) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.logged_at >= _REFUSAL_LOG_INTERVAL_SECONDS:
            logger.warning("%s (%d since the last such line)", self.what, self.count)
            self.count = 0
            self.logged_at = now


_connections_refused = _RefusalLog("connection refused: the worker is at its connection cap")
_headers_refused = _RefusalLog("request refused: its headers are over the size cap (431)")


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with the limits of this module (see its docstring)."""

    # Connections waiting for a request (headers not in yet, or idle between two requests),
    # the longest-waiting first: the ones a new connection may take the place of at the cap.
    # One per worker process, as uvicorn's own connection set is.
    waiting: OrderedDict[GuardedHttpToolsProtocol, None] = OrderedDict()
    # Connections whose request body is still arriving, and the sweep that checks them.
    reading_bodies: dict[GuardedHttpToolsProtocol, None] = {}
    body_sweep: asyncio.TimerHandle | None = None

    def __init__(self, *arguments, **keywords) -> None:
        super().__init__(*arguments, **keywords)
        self.limits = connection_limits()
        self.admitted = False  # False: refused at the connection cap, never counted
        self.refused = False  # answered by a limit: whatever else arrives is ignored
        self.reading_headers = True
        self.message_started = False
        self.header_bytes = 0  # received while the headers are incomplete (buffered)
        self.parsed_header_bytes = 0  # of the request line and header lines parsed
        self.header_deadline: asyncio.TimerHandle | None = None
        self.data_seen_at = 0.0

    # --- connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections and not self._evict_one_waiting():
            self.transport = transport
            self.refused = True
            _connections_refused.note()
            transport.write(TOO_MANY_CONNECTIONS)
            transport.close()
            return
        super().connection_made(transport)
        self.admitted = True
        self.waiting[self] = None
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self.reading_bodies.pop(self, None)
        if not self.admitted:
            self.parser = None  # type: ignore[assignment]
            return
        super().connection_lost(exc)

    def _evict_one_waiting(self) -> bool:
        """Close the connection that has waited longest for a request; False when none is."""
        while self.waiting:
            oldest, _ = self.waiting.popitem(last=False)
            oldest._cancel_header_deadline()
            if oldest.transport is not None and not oldest.transport.is_closing():
                oldest.transport.close()
                return True
        return False

    def _stop_waiting(self) -> None:
        self.waiting.pop(self, None)
        self._cancel_header_deadline()

    # --- reading

    def data_received(self, data: bytes) -> None:
        # uvicorn's own data_received, with the header caps (its version answers every parser
        # error with 400, the header field cap's included).
        if self.refused:
            return
        self.data_seen_at = self.loop.time()
        self._unset_keepalive_if_required()
        reading_before = self.reading_headers
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            if isinstance(error.__context__, HeaderFieldTooLarge):
                self._refuse_headers(HEADERS_TOO_LARGE)
            else:
                self._invalid_request()
            return
        except httptools.HttpParserError:
            self._invalid_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self.reading_headers:
            # Counted only when the whole chunk was header bytes of this request: a chunk that
            # also held the end of the previous request is not (never a false refusal).
            if reading_before:
                self.header_bytes += len(data)
                if self.header_bytes > self.limits.max_header_bytes:
                    self._refuse_headers(HEADERS_TOO_LARGE)
                    return
            if self.header_deadline is None:
                self._arm_header_deadline()

    def _invalid_request(self) -> None:
        message = "Invalid HTTP request received."
        self.logger.warning(message)
        self._stop_waiting()
        self.send_400_response(message)

    def _refuse_headers(self, answer: bytes) -> None:
        _headers_refused.note()
        self._stop_waiting()
        self.refused = True
        self.transport.write(answer)
        self.transport.close()

    # --- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_headers = True
        self.message_started = True
        self.header_bytes = 0
        self.parsed_header_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.parsed_header_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # The parsed lines are counted too: a whole block that arrived in one chunk is
        # complete before data_received could count it.
        size = len(name) + len(value)
        self.parsed_header_bytes += size
        if (
            size > self.limits.max_header_field_bytes
            or self.parsed_header_bytes > self.limits.max_header_bytes
        ):
            raise HeaderFieldTooLarge
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.reading_headers = False
        self.message_started = False
        self._stop_waiting()
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self.data_seen_at = self.loop.time()
            self.reading_bodies[self] = None
            self._ensure_body_sweep()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.reading_bodies.pop(self, None)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:
            # Idle until the next request (uvicorn's keep-alive timeout closes it).
            self.waiting[self] = None

    def handle_websocket_upgrade(self) -> None:
        self._stop_waiting()
        super().handle_websocket_upgrade()

    # --- the header deadline

    def _arm_header_deadline(self) -> None:
        self.header_deadline = self.loop.call_later(
            self.limits.header_timeout_seconds, self._headers_too_slow
        )

    def _cancel_header_deadline(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _headers_too_slow(self) -> None:
        self.header_deadline = None
        if not self.reading_headers or self.transport.is_closing():
            return
        self.waiting.pop(self, None)
        self.refused = True
        if self.message_started:
            self.transport.write(HEADERS_TIMED_OUT)
        self.transport.close()

    # --- stalled bodies

    def _ensure_body_sweep(self) -> None:
        cls = type(self)
        if cls.body_sweep is None:
            cls.body_sweep = self.loop.call_later(
                _BODY_SWEEP_INTERVAL_SECONDS, cls._sweep_stalled_bodies, self.loop
            )

    @classmethod
    def _sweep_stalled_bodies(cls, loop: asyncio.AbstractEventLoop) -> None:
        cls.body_sweep = None
        now = loop.time()
        for connection in list(cls.reading_bodies):
            if connection.flow is not None and connection.flow.read_paused:
                # uvicorn stopped reading (the application has not taken the body yet): the
                # client is not the one stalling.
                connection.data_seen_at = now
            elif now - connection.data_seen_at > connection.limits.body_idle_timeout_seconds:
                del cls.reading_bodies[connection]
                connection.transport.close()
        if cls.reading_bodies:
            cls.body_sweep = loop.call_later(
                _BODY_SWEEP_INTERVAL_SECONDS, cls._sweep_stalled_bodies, loop
            )
