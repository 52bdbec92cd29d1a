"""ASGI entry point: channels' protocol router with HTTP handled by Django.

Static files (the Django admin's CSS/JS) are served by Django's own handler so that the one
``make run`` command gives a usable admin without a separate web server.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_http_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - needs Django set up first
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from config.drain import InFlightRequests  # noqa: E402
from config.lifespan import make_lifespan  # noqa: E402
from config.v1_handler import APIHandler, BodySizeLimit, PathRouter  # noqa: E402

CONSOLE_IMPORT_FRAMING_BYTES = 64 * 1024
CONSOLE_IMPORT_REFUSAL = (
    "<!doctype html><title>Import too large</title><h1>Import too large</h1>"
    "<p>An account import may be at most 16 MiB. Split the export into smaller files and "
    'import them one by one. <a href="/admin/proxy/account/import/">Back to the import</a></p>'
)

# Every HTTP request is tracked so a graceful stop can wait for the last ones (config/drain.py).
_django = ASGIStaticFilesHandler(django_http_application)
http_application = InFlightRequests(
    PathRouter(
        prefix="/v1/",
        api=APIHandler(),
        default=PathRouter(
            # An account import may carry a large backup (its own cap).
            prefix="/api/admin/accounts/import",
            api=BodySizeLimit(_django, limit=settings.ADMIN_IMPORT_MAX_BODY_BYTES),
            default=PathRouter(
                # The console's import page takes the same backups as a file upload (the
                # multipart framing on top; the form itself refuses a file over 16 MiB).
                prefix="/admin/proxy/account/import/",
                api=BodySizeLimit(
                    _django,
                    limit=settings.ADMIN_IMPORT_MAX_BODY_BYTES + CONSOLE_IMPORT_FRAMING_BYTES,
                    refusal_html=CONSOLE_IMPORT_REFUSAL,
                ),
                # Every other route (webhook, admin, pages): bodies over
                # MAX_REQUEST_BODY_BYTES get 413.
                default=BodySizeLimit(_django, limit=settings.MAX_REQUEST_BODY_BYTES),
            ),
        ),
    )
)
application = ProtocolTypeRouter(
    {"http": http_application, "lifespan": make_lifespan(http_application)}
)
