"""``GET /healthz``: PostgreSQL ``select 1`` and Redis ``PING`` (codex-proxy spec §6.9)."""

from __future__ import annotations

import logging

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from django_redis import get_redis_connection

logger = logging.getLogger(__name__)


def _check_postgresql() -> None:
    with connection.cursor() as cursor:
        cursor.execute("select 1")
        cursor.fetchone()


def _check_redis() -> None:
    get_redis_connection("default").ping()


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """204 with an empty body when both stores answer; 503 naming the failed ones otherwise.

    The 503 body carries only store names and a fixed word, never an exception text (which
    could hold a host, a user or a socket path).
    """
    checks = {}
    for name, check in (("postgresql", _check_postgresql), ("redis", _check_redis)):
        try:
            check()
            checks[name] = "ok"
        except Exception as error:  # any failure means "not healthy"; the reason goes to the log
            logger.warning("healthz: %s check failed: %s", name, type(error).__name__)
            checks[name] = "unavailable"
    if all(state == "ok" for state in checks.values()):
        return HttpResponse(status=204)
    failed = sorted(name for name, state in checks.items() if state != "ok")
    return JsonResponse({"status": "unavailable", "failed": failed, "checks": checks}, status=503)
