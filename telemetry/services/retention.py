"""Retention trims of the three growing tables (seed 004 §2.10), in batches.

Each batch is its own short statement, so a large backlog never holds one long lock and live
writes keep flowing between batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

DELETE_BATCH_SIZE = 5000

# (table, time column). Table names are constants, never user input.
_TRIMMED_TABLES = {
    "usage_records": "created_at",
    "ops_error_logs": "created_at",
    "request_time_buckets": "bucket_start",
}


def delete_older_than(*, table: str, cutoff: datetime, batch_size: int = DELETE_BATCH_SIZE) -> int:
    """Delete rows of ``table`` whose time column is before ``cutoff``; return how many."""
    column = _TRIMMED_TABLES[table]
    deleted = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"delete from {table} where ctid in "  # noqa: S608 - constant names
                f"(select ctid from {table} where {column} < %s limit %s)",
                [cutoff, batch_size],
            )
            deleted += cursor.rowcount
            if cursor.rowcount < batch_size:
                return deleted


@dataclass(frozen=True)
class TrimResult:
    usage_records: int
    ops_error_logs: int
    request_time_buckets: int


def telemetry_trim(
    *,
    now: datetime,
    usage_retention_days: int,
    ops_error_retention_days: int,
    bucket_retention_days: int,
    batch_size: int = DELETE_BATCH_SIZE,
) -> TrimResult:
    """Delete facts and buckets older than their retention windows (counted back from ``now``)."""
    return TrimResult(
        usage_records=delete_older_than(
            table="usage_records",
            cutoff=now - timedelta(days=usage_retention_days),
            batch_size=batch_size,
        ),
        ops_error_logs=delete_older_than(
            table="ops_error_logs",
            cutoff=now - timedelta(days=ops_error_retention_days),
            batch_size=batch_size,
        ),
        request_time_buckets=delete_older_than(
            table="request_time_buckets",
            cutoff=now - timedelta(days=bucket_retention_days),
            batch_size=batch_size,
        ),
    )


def usage_records_clear(*, batch_size: int = DELETE_BATCH_SIZE) -> int:
    """Delete every usage record (the admin API's "clear", spec §6.6), in batches; the buckets
    and ``account_usage`` stay (they are the dashboard's record). Returns how many."""
    everything = datetime(9999, 12, 31, tzinfo=UTC)
    return delete_older_than(table="usage_records", cutoff=everything, batch_size=batch_size)
