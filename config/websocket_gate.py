"""What every HTTP request of ``/v1`` meets before its key is checked, for the client
WebSocket too (``proxy/v1/handler.py`` does it for HTTP): the client resolved through
``TRUSTED_PROXIES`` (so the ledger's client IP is the real one) and the Host checked against
``ALLOWED_HOSTS`` — a bad Host is refused with HTTP 400 before the upgrade is accepted — and
the path checked against the routes there are: an upgrade to any other path is refused with
HTTP 404 (the router behind would raise, a 500 with a traceback per attempt)."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest

from config.middleware import resolve_forwarded_request
from proxy.domain.client_errors import ClientError
from proxy.v1.errors import INVALID_HOST

NO_SUCH_ROUTE = ClientError(404, "invalid_request_error", "not_found", "No WebSocket route here")


def _meta(scope) -> dict[str, str]:
    meta = {"REMOTE_ADDR": (scope.get("client") or ("",))[0] or ""}
    for name, value in scope.get("headers", []):
        key = name.decode("latin-1").upper().replace("-", "_")
        meta[f"HTTP_{key}"] = value.decode("latin-1")
    server = scope.get("server") or (None, None)
    meta["SERVER_NAME"], meta["SERVER_PORT"] = str(server[0] or ""), str(server[1] or "")
    return meta


class WebSocketGate:
    """ASGI middleware in front of the ``websocket`` protocol's router, which serves
    ``paths``."""

    def __init__(self, application, *, paths: frozenset[str]) -> None:
        self.application = application
        self.paths = paths

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("path") not in self.paths:
            await self._refuse(scope, receive, send, NO_SUCH_ROUTE)
            return
        request = HttpRequest()
        request.META = _meta(scope)
        resolve_forwarded_request(request.META, tuple(settings.TRUSTED_PROXIES))
        try:
            request.get_host()
        except DisallowedHost:
            await self._refuse(scope, receive, send, INVALID_HOST)
            return
        client = scope.get("client") or (None, None)
        scope = {**scope, "client": (request.META["REMOTE_ADDR"] or None, client[1])}
        await self.application(scope, receive, send)

    @staticmethod
    async def _refuse(scope, receive, send, error: ClientError) -> None:
        message = await receive()  # websocket.connect
        if message["type"] != "websocket.connect":
            return
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": error.status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            body = json.dumps(error.body()).encode()
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close"})
