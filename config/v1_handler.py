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
its budget; ``proxy.policies.early`` — the dispatch takes that admission over, so the request
counts once). Then it reads the body (413 when a chunked one passes the limit, 503 when it no
longer fits), runs the async view (which reuses the key check, still one PostgreSQL round trip),
streams the response, and cancels the view when the client leaves. At the end the body memory
is given back, and so is an admission no dispatch took over. Refusals with the body unread
close the connection after the answer.

``BodySizeLimit`` caps the body of every other route (the webhook, the admin) the same way:
Django's own handler would spool a body of any size to disk before the view sees it. Under
``/api/admin/`` its 413 is the admin API's envelope. ``AdminCredentialsBeforeBody`` guards the
one admin route with a larger cap (the account import): its credentials are checked from the
headers before a byte of its body is read, as ``/v1`` does with the client key.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.cookie import parse_cookie
from django.utils.log import log_response

from common import clock
from config.middleware import resolve_forwarded_request
from proxy.admin_api.authentication import admin_credentials_refusal
from proxy.admin_api.envelope import BodyCode, error_body
from proxy.dispatch.sse import SERVER_SHUTDOWN
from proxy.dispatch.types import RequestTiming
from proxy.v1 import chat as chat_views
from proxy.v1 import responses as responses_views
from proxy.v1.body_memory import SERVER_BUSY, SERVER_BUSY_RETRY_AFTER_SECONDS, BodyHold
from proxy.v1.common import (
    admit_before_body,
    authenticate_before_body,
    give_back_untaken_admission,
    request_timing,
    stamp_overhead,
)
from proxy.v1.errors import (
    INVALID_HOST,
    body_too_large,
    error_response,
    request_id_for,
    request_id_from,
)

logger = logging.getLogger(__name__)

# The POST routes of proxy/urls.py, by exact path: served without Django's URL resolver.
DIRECT_VIEWS = {
    "/v1/responses": responses_views.responses,
    "/v1/responses/review": responses_views.responses_review,
    "/v1/responses/compact": responses_views.responses_compact,
    "/v1/chat/completions": chat_views.chat_completions,
}


class APIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        # The trusted-proxy resolution runs in __call__, before the Host and key checks.
        self._middleware_chain = convert_exception_to_response(self._get_response_async)

    async def __call__(self, scope, receive, send) -> None:
        limit = settings.V1_MAX_BODY_BYTES
        body_file = io.BytesIO()
        timing = RequestTiming()  # x-cpr-overhead-ms counts from here
        try:
            request = self.request_class(scope, body_file)
        except UnicodeDecodeError:
            await self.send_response(HttpResponseBadRequest(), send)
            return
        request.cpr_timing = timing
        resolve_forwarded_request(request.META, tuple(settings.TRUSTED_PROXIES))
        try:
            request.get_host()
        except DisallowedHost:
            request_id = request_id_from(_header(scope, b"x-request-id"))
            await self.send_response(
                stamp_overhead(error_response(INVALID_HOST, request_id), timing), send
            )
            return
        if _declared_length(scope) > limit:
            await self._refuse_too_large(scope, send, limit, timing)
            return
        refusal = await authenticate_before_body(request)
        if refusal is not None:
            # The body was never read; the server closes the connection after the answer.
            await self.send_response(stamp_overhead(refusal, timing), send)
            return
        hold = BodyHold()
        if not hold.grow_to(_declared_length(scope)):
            # The process holds as many bodies as it may (proxy/v1/body_memory.py).
            await self._refuse_unread(request, send, _server_busy(request), timing)
            return
        try:
            refusal = await admit_before_body(request)
            if refusal is not None:
                # The key's policy said no from the headers: not a byte of the body is read.
                await self._refuse_unread(request, send, refusal, timing)
                return
            await self._read_and_answer(request, body_file, hold, scope, receive, send)
        finally:
            hold.release()
            await give_back_untaken_admission(request)

    async def _read_and_answer(
        self, request: HttpRequest, body_file: io.BytesIO, hold: BodyHold, scope, receive, send
    ) -> None:
        """Read the body (held against the process's body memory as it grows), then answer."""
        limit = settings.V1_MAX_BODY_BYTES
        timing = request.cpr_timing
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
        responding = asyncio.create_task(self._respond(request, send))
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
        self, request: HttpRequest, send, response: HttpResponse, timing: RequestTiming
    ) -> None:
        """Answer ``response`` with the body (or its rest) unread, and close the connection
        after it: the unread bytes are not taken in to find the next request."""
        response["Connection"] = "close"
        await self.send_response(stamp_overhead(response, timing), send)

    async def _respond(self, request, send) -> None:
        view = DIRECT_VIEWS.get(request.path_info) if request.method == "POST" else None
        if view is None:
            response = await self.get_response_async(request)
        else:
            # The POST routes go straight to their view: no URL resolver, no middleware
            # chain (the handler has none), the same 4xx/5xx log line as Django's.
            response = await view(request)
            if response.status_code >= 400:
                log_response(
                    "%s: %s",
                    response.reason_phrase,
                    request.path,
                    response=response,
                    request=request,
                )
        stamp_overhead(response, request_timing(request))
        ending = getattr(response, "cpr_ending", None)
        if ending is None:
            await self.send_response(response, send)
        else:
            await send_event_stream(response, ending, send)

    async def _refuse_too_large(self, scope, send, limit: int, timing: RequestTiming) -> None:
        """413 in the /v1 error envelope (spec §1.1), echoing the client's request id."""
        request_id = request_id_from(_header(scope, b"x-request-id"))
        response = error_response(body_too_large(limit), request_id)
        await self.send_response(stamp_overhead(response, timing), send)

    @staticmethod
    async def _client_left(receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


async def send_event_stream(response, ending, send) -> None:
    """Send a /v1 SSE answer: each item of its generator as one body message, the one flagged
    last by ``ending`` ending the body (one write for the last events and the end of the
    chunked body, where Django's own sending adds an empty closing message)."""
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    async with contextlib.aclosing(aiter(response)) as content:
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


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _declared_length(scope) -> int:
    """The request's Content-Length (0 when absent or unreadable)."""
    try:
        return int(_header(scope, b"content-length") or 0)
    except ValueError:
        return 0


def plain_too_large(limit: int) -> HttpResponse:
    """The 413 of the webhook and the pages."""
    return JsonResponse({"error": "request_too_large", "limit_bytes": limit}, status=413)


def admin_too_large(limit: int) -> HttpResponse:
    """The 413 of ``/api/admin/``, in the admin API's envelope (spec §6.1, body code 41301)."""
    response = JsonResponse(
        error_body(BodyCode.BODY_TOO_LARGE, f"The request body is larger than {limit} bytes"),
        status=BodyCode.BODY_TOO_LARGE.http_status,
    )
    response["Cache-Control"] = "no-store"
    return response


async def _send_and_close(send, response: HttpResponse) -> None:
    """Answer ``response`` and have the server close the connection (the body is unread)."""
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": [
                (name.encode("latin-1"), value.encode("latin-1"))
                for name, value in response.items()
            ]
            + [(b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": response.content})


class BodySizeLimit:
    """Refuse a request body over ``limit`` bytes with 413 (``too_large``'s answer) before the
    wrapped application (Django's handler) sees any of it: a declared Content-Length at once, a
    chunked body as soon as it passes the limit. A body within it is handed on in one
    message."""

    def __init__(self, app, *, limit: int, too_large=plain_too_large):
        self.app = app
        self.limit = limit
        self.too_large = too_large

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if _declared_length(scope) > self.limit:
            return await self._refuse(send)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.limit:
                return await self._refuse(send)
            if not message.get("more_body", False):
                break
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()  # later reads wait for the client's disconnect
            delivered = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await self.app(scope, replay, send)

    async def _refuse(self, send) -> None:
        await _send_and_close(send, self.too_large(self.limit))


class AdminCredentialsBeforeBody:
    """Answer the admin API's 401 from the headers alone (``x-api-key``, else the session
    cookie) before any of the body is read: an anonymous client cannot make the server take in
    the account import's 16 MiB. The view checks the credentials again as usual."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        api_keys = [value for name, value in scope.get("headers", ()) if name == b"x-api-key"]
        cookies = [value for name, value in scope.get("headers", ()) if name == b"cookie"]
        token = parse_cookie(b"; ".join(cookies).decode("latin-1")).get(
            settings.SESSION_COOKIE_NAME
        )
        refusal = await sync_to_async(admin_credentials_refusal, thread_sensitive=False)(
            api_key=b",".join(api_keys).decode("latin-1") if api_keys else None,
            session_token=token,
        )
        if refusal is None:
            return await self.app(scope, receive, send)
        response = JsonResponse(error_body(refusal.code, refusal.message), status=401)
        response["Cache-Control"] = "no-store"
        return await _send_and_close(send, response)


class PathRouter:
    """Send ``prefix`` paths (with ``exact``: only that path) to ``api``, everything else to
    ``default``."""

    def __init__(self, *, prefix: str, api, default, exact: bool = False):
        self.prefix = prefix
        self.api = api
        self.default = default
        self.exact = exact

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (
            scope["path"] == self.prefix if self.exact else scope["path"].startswith(self.prefix)
        ):
            return await self.api(scope, receive, send)
        return await self.default(scope, receive, send)
