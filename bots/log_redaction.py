"""Keep ADMIN_SECRET out of request logs.

The admin endpoints carry the secret in their path (``/telegram/setwebhook/<ADMIN_SECRET>``, a
contract of the original), and both uvicorn's access log and Django's ``django.request`` log
(every 4xx/5xx response) print request paths. A filter on those loggers masks the segment before
any handler formats the record.
"""

from __future__ import annotations

import logging
import re

ADMIN_PATH = re.compile(r"(/telegram/(?:setwebhook|deletewebhook)/)[^/?#\s\"]+")
MASK = "<redacted>"
REQUEST_LOGGERS = ("uvicorn.access", "django.request", "django.server")


def redact_admin_paths(text: str) -> str:
    """``text`` with every admin endpoint's secret segment replaced by ``<redacted>``."""
    return ADMIN_PATH.sub(rf"\g<1>{MASK}", text)


class RedactAdminSecret(logging.Filter):
    """Masks admin-path secrets in a record's message and arguments; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_admin_paths(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_admin_paths(value) if isinstance(value, str) else value
                for value in record.args
            )
        return True


def install_admin_secret_redaction() -> None:
    """Attach the filter to the request loggers once (idempotent).

    Logger filters survive a later ``dictConfig`` of those loggers (uvicorn configures its own
    after Django may have started), which removes handlers but not filters.
    """
    for name in REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactAdminSecret) for existing in logger.filters):
            logger.addFilter(RedactAdminSecret())
