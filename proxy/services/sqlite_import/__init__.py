"""``manage.py import_sqlite``: the one-shot move from the original's SQLite v3 database
(seed 004 §6).

Refuses unless the target is migrated to the current version and holds no business rows (the
eleven tables of seed §4), and unless the source's schema is v3. Then everything goes in ONE
PostgreSQL transaction: all of it is imported, or (on any bad value or rejected row) nothing.
The eleven tables are locked for the duration, so a web process starting meanwhile (which
would create the default admin and settings) waits and then finds them filled, and a second
import waits and is then refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor

from common import clock
from proxy.services.sqlite_import.proxy_tables import import_proxy_tables
from proxy.services.sqlite_import.source import open_source, source_failure
from telemetry.services.legacy_ledger_import import import_ledger_tables
from telemetry.services.legacy_sqlite import (
    ImportDataError,
    ImportRefused,
    ImportReport,
    ProgressFactory,
    no_progress,
)

__all__ = ["BUSINESS_TABLES", "ImportDataError", "ImportRefused", "ImportReport", "sqlite_import"]

# Seed 004 §4's tables with business rows (schema_migrations is the migrations' own).
BUSINESS_TABLES = (
    "admin_users",
    "client_api_keys",
    "runtime_settings",
    "accounts",
    "account_usage",
    "usage_records",
    "ops_error_logs",
    "request_time_buckets",
    "account_cookies",
    "fingerprints",
    "fingerprint_update_history",
)


def _refuse_unmigrated_target() -> None:
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        first = pending[0][0]
        raise ImportRefused(
            f"the database is not migrated to the current version ({len(pending)} migration(s) "
            f"to apply, first {first.app_label}.{first.name}); run `python manage.py migrate`"
        )


def _refuse_non_empty_target() -> None:
    with connection.cursor() as cursor:
        # EXCLUSIVE: reads go on, writers (a starting web process, another import) wait.
        cursor.execute(f"lock table {', '.join(BUSINESS_TABLES)} in exclusive mode")
        filled = []
        for table in BUSINESS_TABLES:
            cursor.execute(f"select exists (select 1 from {table})")  # noqa: S608
            if cursor.fetchone()[0]:
                filled.append(table)
    if filled:
        raise ImportRefused(
            f"the target database is not empty ({', '.join(filled)} already hold rows); the "
            "import runs once, into a freshly migrated database that web, worker and beat have "
            "never started on"
        )


# The longest an import may take, reading the source included (``--time-limit``).
DEFAULT_TIME_LIMIT_SECONDS = 3600


def sqlite_import(
    *,
    path: Path,
    progress: ProgressFactory = no_progress,
    time_limit_seconds: float = DEFAULT_TIME_LIMIT_SECONDS,
) -> ImportReport:
    """Import the v3 database at ``path``; return the report.

    Raises ImportRefused (nothing done) or ImportDataError (everything rolled back), also
    when reading the source takes longer than ``time_limit_seconds``."""
    _refuse_unmigrated_target()
    source = open_source(path, deadline=clock.monotonic() + time_limit_seconds)
    report = ImportReport()
    try:
        with transaction.atomic():
            _refuse_non_empty_target()
            import_proxy_tables(source=source, report=report)
            import_ledger_tables(source=source, report=report, progress=progress)
    except sqlite3.Error as error:
        raise source_failure(error, time_limit_seconds=time_limit_seconds) from None
    finally:
        source.close()
    return report
