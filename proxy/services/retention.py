"""Proxy-side retention (seed 004 §2.10): fingerprint history cap, expired cookies, and the
admin log-in audit (90 days)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection

FINGERPRINT_HISTORY_KEEP = 100
COOKIE_DELETE_BATCH_SIZE = 5000
LOGIN_EVENT_RETENTION = timedelta(days=90)


def fingerprint_history_trim(*, keep: int = FINGERPRINT_HISTORY_KEEP) -> int:
    """Keep the newest ``keep`` rows (``created_at desc, id desc``); return how many were
    deleted."""
    with connection.cursor() as cursor:
        cursor.execute(
            "delete from fingerprint_update_history where id in ("
            " select id from fingerprint_update_history"
            " order by created_at desc, id desc offset %s)",
            [keep],
        )
        return cursor.rowcount


def account_cookies_delete_expired(
    *, now: datetime, batch_size: int = COOKIE_DELETE_BATCH_SIZE
) -> int:
    """Delete cookies whose ``expires_at`` has passed (session cookies, NULL, stay); return
    how many."""
    deleted = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                # A session cookie (expires_at NULL) never compares true, so it stays.
                "delete from account_cookies where id in (select id from account_cookies"
                " where expires_at <= %s limit %s)",
                [now, batch_size],
            )
            deleted += cursor.rowcount
            if cursor.rowcount < batch_size:
                return deleted


def admin_login_events_trim(*, now: datetime, batch_size: int = COOKIE_DELETE_BATCH_SIZE) -> int:
    """Delete log-in audit rows older than 90 days, in batches; return how many."""
    deleted = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "delete from admin_login_events where id in (select id from admin_login_events"
                " where created_at < %s limit %s)",
                [now - LOGIN_EVENT_RETENTION, batch_size],
            )
            deleted += cursor.rowcount
            if cursor.rowcount < batch_size:
                return deleted
