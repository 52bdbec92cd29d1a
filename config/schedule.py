"""The Celery beat schedule: every periodic job of the project, in one place.

Entries name tasks by their registered name so this module imports no app. Each periodic job is
also listed in the README's "Periodic jobs" table.
"""

from celery.schedules import crontab

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
    # Support bot: idempotency claims older than 7 days (Telegram stopped redelivering long
    # before), daily.
    "bots-trim-processed-updates": {
        "task": "bots.tasks.processed_updates_trim_task",
        "schedule": crontab(minute=23, hour=3),
    },
}
