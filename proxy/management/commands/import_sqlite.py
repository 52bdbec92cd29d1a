"""``python manage.py import_sqlite <path>``: move the original's SQLite v3 database in.

One-shot, into a freshly migrated, empty database, before web/worker/beat first start (they
create the admin and the settings row, after which the target is no longer empty). Prints a
report: rows per table, normalisations, what was dropped. Exit status 1 when refused or rolled
back (the message says why; nothing was written). See docs/operations.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from common import clock
from proxy.services.sqlite_import import (
    DEFAULT_TIME_LIMIT_SECONDS,
    ImportDataError,
    ImportRefused,
    sqlite_import,
)


class Command(BaseCommand):
    help = "Import the original codex-proxy-rs SQLite (schema v3) database, in one transaction."

    def add_arguments(self, parser) -> None:
        parser.add_argument("path", type=Path, help="the original's .sqlite file (read-only)")
        parser.add_argument(
            "--time-limit",
            type=float,
            default=DEFAULT_TIME_LIMIT_SECONDS,
            help="seconds the import may spend reading the source; past them every read stops "
            f"and the import is rolled back (default: {DEFAULT_TIME_LIMIT_SECONDS})",
        )

    def handle(self, *args, path: Path, time_limit: float, **options) -> None:
        started = clock.monotonic()

        def progress(description: str, total: int):
            # On the terminal's stderr only (disable=None: off when stderr is not a terminal),
            # so the report on stdout stays clean.
            return tqdm(total=total, desc=description, unit="rows", disable=None, file=sys.stderr)

        try:
            report = sqlite_import(path=path, progress=progress, time_limit_seconds=time_limit)
        except ImportRefused as refusal:
            raise CommandError(f"import refused: {refusal}") from None
        except ImportDataError as error:
            raise CommandError(f"import rolled back, nothing was written: {error}") from None
        self.stdout.write(
            f"imported {path} (SQLite schema v3) in {clock.monotonic() - started:.1f} s"
        )
        for line in report.lines():
            self.stdout.write(line)
        self.stdout.write("next: python manage.py rebuild_buckets, then start web, worker and beat")
