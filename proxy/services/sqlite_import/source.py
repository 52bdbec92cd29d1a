"""The source of ``import_sqlite``: the original's SQLite database, opened read-only and
refused unless its schema is v3 (seed 004 §6.1: an unknown lineage is not guessed at)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from telemetry.services.legacy_sqlite import ImportRefused

SOURCE_SCHEMA_VERSION = 3


def open_source(path: Path) -> sqlite3.Connection:
    """The database at ``path``, read-only (``mode=ro``: SQLite itself refuses every write).

    Raises ImportRefused when it is missing, not a SQLite database, or not schema v3.
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
        _check_version(source, path)
    except BaseException:
        source.close()
        raise
    return source


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
