"""The ASGI handler of ``/v1``: Django requests, URL routing and async views, without the
per-request thread machinery the API does not need.

Django's stock ASGI handler does three things the API pays for on every request and never uses:
it opens a thread-sensitive context (a fresh thread per request, because the request signals
have synchronous receivers), sends ``request_started``/``request_finished`` (which close the
request thread's ORM connections — the API's hot path uses its own async pool and its ledger
threads close their own), and runs middleware written for sync code through a thread hop each.
Measured with bench/ (see bench/README.md) these made the API queue behind one thread.

This handler builds Django's request from the headers first and, before a byte of the body is
read: resolves the client through the trusted proxies, checks the Host against ALLOWED_HOSTS
(400), refuses a declared body over ``V1_MAX_BODY_BYTES`` (413, spec §1.1) and, on the POST
routes, checks the client key (401: an anonymous client cannot make the server read 16 MiB),
holds the declared size of the process's body memory (503 ``server_busy`` when it is full,
``proxy.v1.body_memory``) and, for a key with a policy, admits the request by the policy from
the headers alone (429 when the key is over its requests or tokens window, its concurrency or
its budget; ``proxy.domain.early_admission`` — the dispatch takes that admission over, so the
request counts once). Then it reads the body (413 when a chunked one passes the limit, 503 when
it no longer fits), runs the async view (which reuses the key check, still one PostgreSQL round
trip), streams the response, and cancels the view when the client leaves. At the end the body
memory is given back, and so is an admission no dispatch took over. Refusals with the body unread
close the connection after the answer.

What the handler learns of a request before its body (its arrival time, its key, its admission)
travels to the view in one typed ``V1Request`` (``proxy/v1/request.py``), passed explicitly. The
trusted-proxy resolution is config's (``config/middleware.py``): ``config/asgi.py`` hands it in,
since proxy/ imports nothing from config/.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.utils.log import log_response

from common import clock
from proxy.domain.dispatch_types import RequestTiming
from proxy.domain.sse import SERVER_SHUTDOWN
from proxy.v1.body_memory import SERVER_BUSY, SERVER_BUSY_RETRY_AFTER_SECONDS, BodyHold
from proxy.v1.common import (
    EventStreamResponse,
    admit_before_body,
    authenticate_before_body,
    give_back_untaken_admission,
    stamp_overhead,
)
from proxy.v1.errors import (
    INVALID_HOST,
    body_too_large,
    error_response,
    request_id_for,
    request_id_from,
)
from proxy.v1.request import V1Request, V1View
from proxy.v1.routes import POST_VIEWS

logger = logging.getLogger(__name__)

# Rewrites a request's META in place so REMOTE_ADDR and the scheme are the real client's.
ClientResolver = Callable[[MutableMapping[str, str]], None]
# ASGI's scope and callables, as Django's ASGIHandler (its stubs) takes them.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class APIHandler(ASGIHandler):
    def __init__(self, *, resolve_client: ClientResolver) -> None:
        super().__init__()
        self.resolve_client = resolve_client

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Callable[..., Any]] = []
        self._template_response_middleware: list[Callable[..., Any]] = []
        self._exception_middleware: list[Callable[..., Any]] = []
        # The trusted-proxy resolution runs in __call__, before the Host and key checks.
        self._middleware_chain = convert_exception_to_response(
            self._get_response_async  # type: ignore[attr-defined]  # Django's; not in the stubs
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = settings.V1_MAX_BODY_BYTES
        body_file = io.BytesIO()
        timing = RequestTiming()  # x-cpr-overhead-ms counts from here
        try:
            request = self.request_class(scope, body_file)
        except UnicodeDecodeError:
            await self.send_response(HttpResponseBadRequest(), send)
            return
        self.resolve_client(request.META)
        try:
            request.get_host()
        except DisallowedHost:
            request_id = request_id_from(header(scope, b"x-request-id"))
            await self.send_response(
                stamp_overhead(error_response(INVALID_HOST, request_id), timing), send
            )
            return
        if declared_length(scope) > limit:
            await self._refuse_too_large(scope, send, limit, timing)
            return
        # The POST routes go straight to their view (no URL resolver); their key is checked now.
        view = POST_VIEWS.get(request.path_info) if request.method == "POST" else None
        v1 = V1Request(http=request, timing=timing)
        refusal = await authenticate_before_body(v1) if view is not None else None
        if refusal is not None:
            # The body was never read; the server closes the connection after the answer.
            await self.send_response(stamp_overhead(refusal, timing), send)
            return
        hold = BodyHold()
        if not hold.grow_to(declared_length(scope)):
            # The process holds as many bodies as it may (proxy/v1/body_memory.py).
            await self._refuse_unread(request, send, _server_busy(request), timing)
            return
        try:
            refusal = await admit_before_body(v1)
            if refusal is not None:
                # The key's policy said no from the headers: not a byte of the body is read.
                await self._refuse_unread(request, send, refusal, timing)
                return
            await self._read_and_answer(v1, view, body_file, hold, scope, receive, send)
        finally:
            hold.release()
            await give_back_untaken_admission(v1)

    async def _read_and_answer(
        self,
        v1: V1Request,
        view: V1View | None,
        body_file: io.BytesIO,
        hold: BodyHold,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Read the body (held against the process's body memory as it grows), then answer
        through ``view`` (a POST route's) or Django's URL resolver (``view`` None)."""
        limit = settings.V1_MAX_BODY_BYTES
        request, timing = v1.http, v1.timing
        while True:
            waiting = clock.monotonic()
            message = await receive()
            timing.client_wait += clock.monotonic() - waiting
            if message["type"] == "http.disconnect":
                return  # the client left before the request was complete
            body_file.write(message.get("body", b""))
            if body_file.tell() > limit:
                # A chunked body (no Content-Length) is refused as soon as it passes the limit.
                await self._refuse_too_large(scope, send, limit, timing)
                return
            if not hold.grow_to(body_file.tell()):
                # A chunked body that no longer fits in the process's body memory.
                await self._refuse_unread(request, send, _server_busy(request), timing)
                return
            if not message.get("more_body", False):
                break
        body_file.seek(0)
        responding = asyncio.create_task(self._respond(v1, view, send))
        listening = asyncio.create_task(self._client_left(receive))
        shutting_down = False
        try:
            await asyncio.wait({responding, listening}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # This request itself is cancelled: uvicorn at the end of a graceful stop's drain.
            shutting_down = True
            raise
        finally:
            # Reached when the client left, and also at the end of the drain: the view is
            # cancelled too, so it closes the upstream stream, releases its slot and hands over
            # its ledger entry before this request counts as finished. At the drain's end the
            # cancellation says so (SERVER_SHUTDOWN): a stream then ends with a failure event.
            for task in (listening, responding):
                if not task.done():
                    task.cancel(SERVER_SHUTDOWN if shutting_down and task is responding else None)
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _refuse_unread(
        self, request: HttpRequest, send: Send, response: HttpResponse, timing: RequestTiming
    ) -> None:
        """Answer ``response`` with the body (or its rest) unread, and close the connection
        after it: the unread bytes are not taken in to find the next request."""
        response["Connection"] = "close"
        await self.send_response(stamp_overhead(response, timing), send)

    async def _respond(self, v1: V1Request, view: V1View | None, send: Send) -> None:
        request = v1.http
        response: HttpResponseBase
        if view is None:
            response = await self.get_response_async(request)
        else:
            # The POST routes go straight to their view: no URL resolver, no middleware
            # chain (the handler has none), the same 4xx/5xx log line as Django's.
            response = await view(request, v1=v1)
            if response.status_code >= 400:
                log_response(
                    "%s: %s",
                    response.reason_phrase,
                    request.path,
                    # Any response: Django reads its status only (the stubs want HttpResponse).
                    response=response,  # type: ignore[arg-type]
                    request=request,
                )
        stamp_overhead(response, v1.timing)
        if isinstance(response, EventStreamResponse) and response.ending is not None:
            await send_event_stream(response, send)
        else:
            await self.send_response(response, send)

    async def _refuse_too_large(
        self, scope: Scope, send: Send, limit: int, timing: RequestTiming
    ) -> None:
        """413 in the /v1 error envelope (spec §1.1), echoing the client's request id."""
        request_id = request_id_from(header(scope, b"x-request-id"))
        response = error_response(body_too_large(limit), request_id)
        await self.send_response(stamp_overhead(response, timing), send)

    @staticmethod
    async def _client_left(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


async def send_event_stream(response: EventStreamResponse, send: Send) -> None:
    """Send a /v1 SSE answer: each item of its generator as one body message, the one flagged
    last by its ``ending`` ending the body (one write for the last events and the end of the
    chunked body, where Django's own sending adds an empty closing message)."""
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    ending = response.ending
    assert ending is not None  # sent so only with its generator's flag (_respond)
    # StreamingHttpResponse.__aiter__ is an async generator; the stubs say AsyncIterator.
    async with contextlib.aclosing(aiter(response)) as content:  # type: ignore[type-var]
        async for chunk in content:
            if ending.last:
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body"})


def _server_busy(request: HttpRequest) -> HttpResponse:
    """503 ``server_busy``: the process holds as many /v1 bodies as it may."""
    response = error_response(SERVER_BUSY, request_id_for(request))
    response["Retry-After"] = str(SERVER_BUSY_RETRY_AFTER_SECONDS)
    return response


def header(scope: Mapping[str, Any], name: bytes) -> str | None:
    key: bytes
    value: bytes
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def declared_length(scope: Mapping[str, Any]) -> int:
    """The request's Content-Length (0 when absent or unreadable)."""
    try:
        return int(header(scope, b"content-length") or 0)
    except ValueError:
        return 0
