"""Periodic jobs of the proxy (scheduled in config/schedule.py)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from proxy.services.account_policies import account_burn_days_roll
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


@shared_task(name="proxy.roll_account_burn_days", soft_time_limit=60, time_limit=90)
def roll_account_burn_days_task() -> int:
    """Every minute: give each account's daily burn cap the new UTC day's baseline (a no-op
    statement the rest of the day). Until it runs past 00:00 UTC the cap applies no limit."""
    return account_burn_days_roll(now=timezone.now())


@shared_task(name="proxy.refresh_models", soft_time_limit=120, time_limit=150)
def refresh_models_task() -> dict:
    """Hourly, and soon after the upstream announces a new ``x-models-etag``: refresh the plan
    model snapshots. Idempotent (a full replacement each time)."""
    from proxy.services.model_refresh import models_refresh

    report = models_refresh(now=timezone.now())
    logger.info("model refresh: %s", report)
    return {"refreshed": report.refreshed, "kept": report.kept, "removed": report.removed}


STARTUP_MODEL_REFRESH_ATTEMPTS = 12
STARTUP_MODEL_REFRESH_RETRY_SECONDS = 10


@shared_task(
    bind=True,
    name="proxy.refresh_models_at_startup",
    soft_time_limit=120,
    time_limit=150,
    max_retries=STARTUP_MODEL_REFRESH_ATTEMPTS - 1,
)
def refresh_models_at_startup_task(self) -> dict:
    """Sent by beat 1 s after it starts (spec §4.5): the model refresh, retried every 10 s (12
    attempts in all) until a plan's models were fetched. With no account to ask it stops: the
    hourly run (and the etag trigger) will fill the catalog later."""
    from proxy.services.model_refresh import models_refresh

    report = models_refresh(now=timezone.now())
    logger.info("start-up model refresh (attempt %s): %s", self.request.retries + 1, report)
    if report.plans_available and not report.refreshed:
        raise self.retry(countdown=STARTUP_MODEL_REFRESH_RETRY_SECONDS)
    return {
        "refreshed": report.refreshed,
        "kept": report.kept,
        "removed": report.removed,
        "deferred": not report.plans_available,
    }


@shared_task(name="proxy.refresh_quotas", soft_time_limit=600, time_limit=660)
def refresh_quotas_task() -> dict:
    """Every PROXY_QUOTA_REFRESH_INTERVAL_SECONDS: re-read the usage of accounts held back by
    their quota and let it put them back into service (spec §4.4). Idempotent."""
    from proxy.services.quota_refresh import quota_refresh

    report = quota_refresh(now=timezone.now())
    if report.checked:
        logger.info("quota refresh: %s", report)
    return {
        "checked": len(report.checked),
        "recovered": report.recovered,
        "still_limited": report.still_limited,
        "failed": report.failed,
    }


@shared_task(name="proxy.read_active_quotas", soft_time_limit=600, time_limit=660)
def read_active_quotas_task() -> dict:
    """Every PROXY_QUOTA_READ_INTERVAL_SECONDS (when not 0): read the usage of the active
    accounts whose quota was not read within that interval, so the console's quota bars stay
    current (issue 38). Idempotent: a second run reads only what is due again."""
    from datetime import timedelta

    from django.conf import settings

    from proxy.services.quota_reads import quota_read_active

    interval = timedelta(seconds=settings.PROXY_QUOTA_READ_INTERVAL_SECONDS)
    report = quota_read_active(now=timezone.now(), interval=interval)
    if report.read or report.failed:
        logger.info("quota read of active accounts: %s", report)
    return {
        "read": len(report.read),
        "limit_reached": len(report.limit_reached),
        "failed": len(report.failed),
    }


@shared_task(name="proxy.update_fingerprint", soft_time_limit=120, time_limit=150)
def update_fingerprint_task() -> dict:
    """Every 72 h and once at start-up: follow the Codex Desktop appcast (spec §2.2)."""
    from proxy.clients.appcast import AppcastError, fetch_latest_release
    from proxy.services.fingerprints import fingerprint_update_from_release

    try:
        release = fetch_latest_release()
    except AppcastError as error:
        logger.warning("fingerprint update skipped: %s", error)
        return {"changed": False, "error": str(error)}
    check = fingerprint_update_from_release(release=release, now=timezone.now())
    if check.changed:
        logger.info("fingerprint updated to %s (%s)", check.app_version, check.build_number)
    return {"changed": check.changed, "app_version": check.app_version, "build": check.build_number}


@shared_task(name="proxy.scan_token_refresh", soft_time_limit=120, time_limit=150)
def scan_token_refresh_task() -> dict:
    """Every PROXY_REFRESH_SCAN_INTERVAL_SECONDS: persist each account's next refresh time and
    enqueue the accounts due now (spec §4.1). Idempotent: a due account enqueued twice is
    refreshed once (the second run finds the lease held or the refresh time moved)."""
    from proxy.services.token_refresh import token_refresh_scan

    report = token_refresh_scan(now=timezone.now())
    for account_id in report.due:
        refresh_account_token_task.delay(account_id)
    return {
        "due": len(report.due),
        "scheduled": report.scheduled,
        "cleared": report.cleared,
        "busy": report.busy,
    }


# 5 attempts, pauses of up to ~260 s in all, each attempt waiting up to 60 s for a permit.
@shared_task(name="proxy.refresh_account_token", soft_time_limit=900, time_limit=960)
def refresh_account_token_task(account_id: str, force: bool = False) -> str:
    """Refresh one account's tokens under its lease (spec §4.2); ``force`` for an operator's
    "refresh now" (also before its scheduled time). Returns the outcome's name."""
    from proxy.services.token_refresh import token_refresh_account

    return str(token_refresh_account(account_id=account_id, force=force))
