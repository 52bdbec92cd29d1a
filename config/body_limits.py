"""The body caps of every route outside ``/v1`` (whose own handler is ``proxy/v1/handler.py``).

``BodySizeLimit`` caps the body of every other route (the webhook, the admin) the same way:
Django's own handler would spool a body of any size to disk before the view sees it. Under
``/api/admin/`` its 413 is the admin API's envelope. ``AdminCredentialsBeforeBody`` guards the
one admin route with a larger cap (the account import): its credentials are checked from the
headers before a byte of its body is read, as ``/v1`` does with the client key.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.http.cookie import parse_cookie

from proxy.admin_api.authentication import admin_credentials_refusal
from proxy.admin_api.envelope import BodyCode, error_body
from proxy.v1.handler import declared_length


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
        if declared_length(scope) > self.limit:
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
