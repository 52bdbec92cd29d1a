"""The pool as background jobs see it: candidate views, scheduler settings and the fingerprint,
read through Django (synchronously) before a job's async part runs."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from proxy.accounts import AccountView, accounts_from_json
from proxy.domain.slots import SchedulerSettings
from proxy.models import Fingerprint, RuntimeSettings
from proxy.selectors import CANDIDATES_JSON_SQL

_CANDIDATES_SQL = "select " + CANDIDATES_JSON_SQL


def pool_account_views(*, now: datetime) -> list[AccountView]:
    """Every ``active`` / ``quota_exhausted`` account with its counters (the request path's own
    query), in insertion order."""
    with connection.cursor() as cursor:
        cursor.execute(_CANDIDATES_SQL, {"now": now})
        (rows,) = cursor.fetchone()
    return accounts_from_json(rows or [])


def current_scheduler_settings() -> SchedulerSettings:
    row: Mapping[str, Any] = (
        RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID)
        .values("rotation_strategy", "max_concurrent_per_account", "request_interval_ms")
        .first()
    ) or {}
    return SchedulerSettings(
        strategy=row.get("rotation_strategy") or "smart",
        max_concurrent_per_account=row.get("max_concurrent_per_account") or 3,
        request_interval_ms=row.get("request_interval_ms") or 0,
    )


def current_fingerprint() -> dict:
    """The fingerprint row ``current`` as a dict (the settings' seed before it exists)."""
    row = Fingerprint.objects.filter(id=Fingerprint.CURRENT_ID).values().first()
    return dict(row) if row else dict(settings.CODEX_FINGERPRINT)
