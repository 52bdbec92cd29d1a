"""The source of ``import_sqlite``: the original's SQLite database, opened read-only and
refused unless its schema is v3 (seed 004 §6.1: an unknown lineage is not guessed at).

The file may be hostile (a copy from anywhere), so it is read defensively: a view, a trigger or
a virtual table — none of which the original creates — refuses the file before anything is read
through it (a ``schema_migrations`` VIEW with a recursive CTE would otherwise run for ever);
the schema is not trusted (``trusted_schema = off``); text arrives as bytes and is decoded with
replacement (``telemetry.services.legacy_sqlite.source_rows``), so an invalid UTF-8 byte in a
token is never quoted by an error; a value over ``LONGEST_VALUE_BYTES`` is an error; and every
statement is cut off at the import's deadline.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from common import clock
from telemetry.services.legacy_sqlite import ImportDataError, ImportRefused

SOURCE_SCHEMA_VERSION = 3
# No value of the original's database comes near this (tokens are a few KiB).
LONGEST_VALUE_BYTES = 16 * 1024 * 1024
# How often (in SQLite virtual-machine steps) a statement checks the deadline.
_DEADLINE_CHECK_STEPS = 1000


def open_source(path: Path, *, deadline: float) -> sqlite3.Connection:
    """The database at ``path``, read-only (``mode=ro``: SQLite itself refuses every write),
    whose statements stop with ``sqlite3.OperationalError`` ("interrupted") once
    ``clock.monotonic()`` passes ``deadline``.

    Raises ImportRefused when it is missing, not a SQLite database, holds views, triggers or
    virtual tables, or is not schema v3.
    """
    if not path.is_file():
        raise ImportRefused(f"source {path} does not exist or is not a file")
    try:
        source = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise ImportRefused(
            f"cannot open {path} read-only ({error}); if the original runs in WAL mode, stop it "
            "cleanly first, or import a copy placed in a writable folder"
        ) from None
    try:
        source.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LONGEST_VALUE_BYTES)
        source.execute("pragma trusted_schema = off")
        _refuse_schema_code(source, path)
        _check_version(source, path)
        source.text_factory = bytes
        source.set_progress_handler(lambda: clock.monotonic() > deadline, _DEADLINE_CHECK_STEPS)
    except BaseException:
        source.close()
        raise
    return source


def _refuse_schema_code(source: sqlite3.Connection, path: Path) -> None:
    """ImportRefused when the file defines anything that runs code when read (views, triggers,
    virtual tables): the original's schema has none."""
    try:
        kinds = source.execute(
            "select type, count(*) from sqlite_master"
            " where type in ('view', 'trigger') or sql like 'create virtual table%'"
            " group by type order by type"
        ).fetchall()
    except sqlite3.DatabaseError as error:
        raise ImportRefused(f"{path} is not a codex-proxy-rs SQLite database ({error})") from None
    if kinds:
        found = ", ".join(
            f"{count} {'virtual table' if kind == 'table' else kind}(s)" for kind, count in kinds
        )
        raise ImportRefused(
            f"{path} defines {found}, which the original's database never has; it is not read"
        )


def source_failure(error: sqlite3.Error, *, time_limit_seconds: float) -> ImportDataError:
    """The ImportDataError of a failure while reading the source, by SQLite's error name only
    (its message may quote a value)."""
    name = getattr(error, "sqlite_errorname", None) or type(error).__name__
    if name == "SQLITE_INTERRUPT":
        return ImportDataError(
            f"reading the source took longer than the time limit ({time_limit_seconds:g} s; "
            "--time-limit)"
        )
    if name == "SQLITE_TOOBIG":
        return ImportDataError(
            f"the source holds a value over {LONGEST_VALUE_BYTES // (1024 * 1024)} MiB"
        )
    return ImportDataError(f"reading the source failed ({name})")


def _check_version(source: sqlite3.Connection, path: Path) -> None:
    try:
        (version,) = source.execute("select max(version) from schema_migrations").fetchone()
    except sqlite3.DatabaseError as error:
        # "no such table" (not the original's database) or "file is not a database".
        raise ImportRefused(f"{path} is not a codex-proxy-rs SQLite database ({error})") from None
    if version != SOURCE_SCHEMA_VERSION:
        raise ImportRefused(
            f"{path} has SQLite schema version {version}; only version "
            f"{SOURCE_SCHEMA_VERSION} (the original's last SQLite release) can be imported. "
            "Start that release of the original once on this file to upgrade it, then retry."
        )
