"""What every HTTP request of ``/v1`` meets before its key is checked, for the client
WebSocket too (``config/v1_handler.py`` does it for HTTP): the client resolved through
``TRUSTED_PROXIES`` (so the ledger's client IP is the real one) and the Host checked against
``ALLOWED_HOSTS`` — a bad Host is refused with HTTP 400 before the upgrade is accepted."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest

from config.middleware import resolve_forwarded_request
from proxy.v1.errors import INVALID_HOST


def _meta(scope) -> dict[str, str]:
    meta = {"REMOTE_ADDR": (scope.get("client") or ("",))[0] or ""}
    for name, value in scope.get("headers", []):
        key = name.decode("latin-1").upper().replace("-", "_")
        meta[f"HTTP_{key}"] = value.decode("latin-1")
    server = scope.get("server") or (None, None)
    meta["SERVER_NAME"], meta["SERVER_PORT"] = str(server[0] or ""), str(server[1] or "")
    return meta


class WebSocketGate:
    """ASGI middleware in front of the ``websocket`` protocol's router."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send) -> None:
        request = HttpRequest()
        request.META = _meta(scope)
        resolve_forwarded_request(request.META, tuple(settings.TRUSTED_PROXIES))
        try:
            request.get_host()
        except DisallowedHost:
            await self._refuse(scope, receive, send)
            return
        client = scope.get("client") or (None, None)
        scope = {**scope, "client": (request.META["REMOTE_ADDR"] or None, client[1])}
        await self.application(scope, receive, send)

    @staticmethod
    async def _refuse(scope, receive, send) -> None:
        message = await receive()  # websocket.connect
        if message["type"] != "websocket.connect":
            return
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": INVALID_HOST.status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            body = json.dumps(INVALID_HOST.body()).encode()
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close"})
