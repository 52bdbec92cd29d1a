"""ASGI entry point: channels' protocol router with HTTP handled by Django and the client
WebSocket of ``/v1/responses`` by its channels consumer (``proxy/v1/websocket.py``).

Static files (the Django admin's CSS/JS) are served by Django's own handler so that the one
``make run`` command gives a usable admin without a separate web server.
"""

import os

from django.core.asgi import get_asgi_application

from config.bootstrap import prepare

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
prepare()  # a no-op under config.run, which prepared the environment this process inherited
django_http_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402 - needs Django set up
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402

from config.body_limits import (  # noqa: E402
    AdminCredentialsBeforeBody,
    BodySizeLimit,
    PathRouter,
    admin_too_large,
)
from config.drain import InFlightRequests  # noqa: E402
from config.lifespan import make_lifespan  # noqa: E402
from config.middleware import resolve_through_trusted_proxies  # noqa: E402
from config.websocket_gate import WebSocketGate  # noqa: E402
from proxy.v1.handler import APIHandler  # noqa: E402
from proxy.v1.websocket import ResponsesSocket  # noqa: E402

CONSOLE_IMPORT_FRAMING_BYTES = 64 * 1024
CONSOLE_IMPORT_REFUSAL = (
    "<!doctype html><title>Import too large</title><h1>Import too large</h1>"
    "<p>An account import may be at most 16 MiB. Split the export into smaller files and "
    'import them one by one. <a href="/admin/proxy/account/import/">Back to the import</a></p>'
)


def console_import_too_large(limit: int) -> HttpResponse:
    """The console's import page is a browser form: its 413 is a page, not JSON."""
    return HttpResponse(CONSOLE_IMPORT_REFUSAL, status=413, content_type="text/html; charset=utf-8")


# Every HTTP request is tracked so a graceful stop can wait for the last ones (config/drain.py).
_django = ASGIStaticFilesHandler(django_http_application)
http_application = InFlightRequests(
    PathRouter(
        prefix="/v1/",
        # The trusted-proxy resolution is config's; proxy/ may not import it (it is handed in).
        api=APIHandler(resolve_client=resolve_through_trusted_proxies),
        default=PathRouter(
            # An account import may carry a large backup (its own cap), from an admin only:
            # the credentials are checked before the body is read.
            prefix="/api/admin/accounts/import",
            exact=True,
            api=AdminCredentialsBeforeBody(
                BodySizeLimit(
                    _django,
                    limit=settings.ADMIN_IMPORT_MAX_BODY_BYTES,
                    too_large=admin_too_large,
                )
            ),
            default=PathRouter(
                # The admin API's 413 is its envelope.
                prefix="/api/admin/",
                api=BodySizeLimit(
                    _django, limit=settings.MAX_REQUEST_BODY_BYTES, too_large=admin_too_large
                ),
                default=PathRouter(
                    # The console's import page takes the same backups as a file upload (the
                    # multipart framing on top; the form itself refuses a file over 16 MiB).
                    prefix="/admin/proxy/account/import/",
                    api=BodySizeLimit(
                        _django,
                        limit=settings.ADMIN_IMPORT_MAX_BODY_BYTES + CONSOLE_IMPORT_FRAMING_BYTES,
                        too_large=console_import_too_large,
                    ),
                    # Every other route (webhook, admin, pages): bodies over
                    # MAX_REQUEST_BODY_BYTES get 413.
                    default=BodySizeLimit(_django, limit=settings.MAX_REQUEST_BODY_BYTES),
                ),
            ),
        ),
    )
)
# The client-facing WebSocket of /v1/responses (the Codex CLI's `supports_websockets`).
# Behind the same trusted-proxy resolution and Host check as HTTP /v1 (config/websocket_gate.py).
websocket_application = WebSocketGate(
    # channels routes consumers with Django's path(); django-stubs' path() takes views only.
    URLRouter([path("v1/responses", ResponsesSocket.as_asgi())]),  # type: ignore[list-item, arg-type]
    paths=frozenset({"/v1/responses"}),
)
application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": websocket_application,
        "lifespan": make_lifespan(http_application),
    }
)
