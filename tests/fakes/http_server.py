"""A real HTTP server on loopback, in a background thread, for faking outside services.

The Telegram Bot API, ChatGPT upstream, OAuth and Turnstile fakes are aiohttp applications
served by ``LocalHTTPServer``: our clients talk real HTTP (connections, timeouts, SSE framing)
to them. Every request is recorded with its headers in arrival order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: list[tuple[str, str]]  # as received, in wire order
    body: bytes
    received_at: float = 0.0
    extra: dict = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None

    def json(self):
        import json

        return json.loads(self.body)


def _is_websocket_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


class LocalHTTPServer:
    """Serve an aiohttp application on 127.0.0.1:<free port> from a daemon thread.

    Use as a context manager or call ``start()`` / ``stop()``. ``requests`` lists what arrived.
    """

    def __init__(
        self,
        build_application: Callable[[LocalHTTPServer], web.Application],
        *,
        port: int = 0,
        record: bool = True,
    ):
        self._build_application = build_application
        self._requested_port = port
        self._record_requests = record
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [request for request in self.requests if request.path == path]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    @web.middleware
    async def _record(self, request: web.Request, handler):
        if not self._record_requests or _is_websocket_upgrade(request):
            # A WebSocket's messages are recorded by its handler (``record``), one per message.
            return await handler(request)
        body = await request.read()
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=[
                (key.decode("latin-1"), value.decode("latin-1"))
                for key, value in request.raw_headers
            ],
            body=body,
            received_at=asyncio.get_running_loop().time(),
        )
        with self._lock:
            self.requests.append(recorded)
        return await handler(request)

    def record(self, recorded: RecordedRequest) -> None:
        """Record ``recorded`` (a message of a WebSocket, as its handler sees it)."""
        if self._record_requests:
            with self._lock:
                self.requests.append(recorded)

    def start(self) -> LocalHTTPServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                application = self._build_application(self)
                application.middlewares.insert(0, self._record)
                self._runner = web.AppRunner(application, access_log=None, handle_signals=False)
                loop.run_until_complete(self._runner.setup())
                site = web.TCPSite(self._runner, "127.0.0.1", self._requested_port)
                loop.run_until_complete(site.start())
                self.port = self._runner.addresses[0][1]
            except BaseException as error:  # reported to the starting thread
                failure.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="local-http-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def run_in_loop(self, coroutine):
        """Run ``coroutine`` on the server's loop from another thread and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> LocalHTTPServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
