"""Periodic jobs of the proxy (scheduled in config/schedule.py)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from proxy.services.retention import (
    account_cookies_delete_expired,
    admin_login_events_trim,
    fingerprint_history_trim,
)
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.services.retention import telemetry_trim

logger = logging.getLogger(__name__)


@shared_task(name="proxy.trim_retention", soft_time_limit=600, time_limit=660)
def trim_retention_task() -> dict[str, int]:
    """Hourly: trim facts and buckets by runtime_settings' retention days, the fingerprint
    history to its newest 100 rows, and the log-in audit to 90 days. Idempotent: a second run
    deletes nothing new."""
    now = timezone.now()
    settings_row = runtime_settings_ensure(now=now)
    trimmed = telemetry_trim(
        now=now,
        usage_retention_days=settings_row.usage_retention_days,
        ops_error_retention_days=settings_row.ops_error_retention_days,
        bucket_retention_days=settings_row.bucket_retention_days,
    )
    result = {
        "usage_records": trimmed.usage_records,
        "ops_error_logs": trimmed.ops_error_logs,
        "request_time_buckets": trimmed.request_time_buckets,
        "fingerprint_update_history": fingerprint_history_trim(),
        "admin_login_events": admin_login_events_trim(now=now),
    }
    logger.info("retention trim: %s", result)
    return result


@shared_task(name="proxy.delete_expired_cookies")
def delete_expired_cookies_task() -> int:
    """Every 5 minutes: delete account cookies past their expiry."""
    return account_cookies_delete_expired(now=timezone.now())


@shared_task(name="proxy.refresh_models", soft_time_limit=120, time_limit=150)
def refresh_models_task() -> dict:
    """Hourly, and soon after the upstream announces a new ``x-models-etag``: refresh the plan
    model snapshots. Idempotent (a full replacement each time)."""
    from proxy.services.model_refresh import models_refresh

    report = models_refresh(now=timezone.now())
    logger.info("model refresh: %s", report)
    return {"refreshed": report.refreshed, "kept": report.kept, "removed": report.removed}
