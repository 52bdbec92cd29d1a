"""The Celery beat schedule: every periodic job of the project, in one place.

Entries name tasks by their registered name so this module imports no app. Each periodic job is
also listed in the README's "Periodic jobs" table. ``STARTUP_TASKS`` are sent once when beat
starts (config/celery.py), so the system does not wait a whole period for its first run.
"""

from celery.schedules import crontab
from django.conf import settings

FINGERPRINT_CHECK_SECONDS = 72 * 3600

BEAT_SCHEDULE: dict[str, dict] = {
    # seed 004 §2.10: hourly trims of usage_records, ops_error_logs, request_time_buckets and
    # fingerprint_update_history.
    "proxy-trim-retention": {
        "task": "proxy.trim_retention",
        "schedule": crontab(minute=7),
    },
    # codex-proxy spec §4.5: the plan model snapshots, hourly (and on a new x-models-etag).
    "proxy-refresh-models": {
        "task": "proxy.refresh_models",
        "schedule": 3600.0,
    },
    # codex-proxy spec §7.5: expired account cookies every 5 minutes.
    "proxy-delete-expired-cookies": {
        "task": "proxy.delete_expired_cookies",
        "schedule": 300.0,
    },
    # codex-proxy spec §4.1: which accounts need a token refresh now (60 s by default).
    "proxy-scan-token-refresh": {
        "task": "proxy.scan_token_refresh",
        "schedule": float(settings.PROXY_REFRESH_SCAN_INTERVAL_SECONDS),
    },
    # codex-proxy spec §4.4: re-read the usage of quota-limited accounts (5 min by default).
    "proxy-refresh-quotas": {
        "task": "proxy.refresh_quotas",
        "schedule": float(settings.PROXY_QUOTA_REFRESH_INTERVAL_SECONDS),
    },
    # Issue 38: read the quota of active accounts (15 min by default; 0 turns it off, below).
    "proxy-read-active-quotas": {
        "task": "proxy.read_active_quotas",
        "schedule": float(settings.PROXY_QUOTA_READ_INTERVAL_SECONDS),
    },
    # codex-proxy spec §2.2: follow the Codex Desktop appcast, every 72 h.
    "proxy-update-fingerprint": {
        "task": "proxy.update_fingerprint",
        "schedule": float(FINGERPRINT_CHECK_SECONDS),
    },
    # Issue 25: each account's daily burn cap starts the new UTC day (every minute).
    "proxy-roll-account-burn-days": {
        "task": "proxy.roll_account_burn_days",
        "schedule": 60.0,
    },
    # Support bot: idempotency claims older than 7 days (Telegram stopped redelivering long
    # before), daily.
    "bots-trim-processed-updates": {
        "task": "bots.tasks.processed_updates_trim_task",
        "schedule": crontab(minute=23, hour=3),
    },
    # Support bot: albums whose queued flush was lost (a worker died), every minute.
    "bots-sweep-albums": {
        "task": "bots.tasks.albums_sweep_task",
        "schedule": 60.0,
    },
    # Support bot: the inbox's updates whose worker nudge was lost (Redis died, a worker died
    # with it), issue 36.
    "bots-sweep-inbox": {
        "task": "bots.tasks.inbox_drain_task",
        "schedule": 15.0,
    },
    # Support bot: the audit trail of admin actions beyond AUDIT_RETENTION_DAYS, daily.
    "bots-trim-admin-audit": {
        "task": "bots.tasks.admin_audit_trim_task",
        "schedule": crontab(minute=37, hour=3),
    },
    # Support bot: a broadcast whose worker died mid-send gets a new send loop (every minute).
    "bots-resume-broadcasts": {
        "task": "bots.tasks.broadcasts_resume_task",
        "schedule": 60.0,
    },
}

if not settings.PROXY_QUOTA_READ_INTERVAL_SECONDS:
    del BEAT_SCHEDULE["proxy-read-active-quotas"]

# (task name, countdown seconds): sent once when beat starts. spec §4.5: the model refresh 1 s
# after start (it retries itself); spec §2.2: the first appcast check at start-up.
STARTUP_TASKS: tuple[tuple[str, float], ...] = (
    ("proxy.refresh_models_at_startup", 1.0),
    ("proxy.update_fingerprint", 1.0),
)
