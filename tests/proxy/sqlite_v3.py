"""Building SQLite databases of the original (schema v3, or older) for the import tests.

The schema comes from tests/proxy/fixtures/sqlite_v3/ (the original's migrations 0001–0003,
restated); rows are inserted with plain SQL, exactly as the original stored them: RFC 3339
text timestamps, 0/1 booleans, JSON as text.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "sqlite_v3"
MIGRATIONS = (
    (1, "initial", "0001_initial.sql"),
    (2, "rename_rotation_strategies", "0002_rename_rotation_strategies.sql"),
    (3, "ops_error_logs", "0003_ops_error_logs.sql"),
)


def build_source(path: Path, *, version: int = 3) -> sqlite3.Connection:
    """A new database at ``path`` migrated (and recorded) up to ``version``, like the original's
    ``database.rs`` leaves it; returns a connection to fill it."""
    database = sqlite3.connect(path)
    database.execute("pragma foreign_keys = on")
    database.executescript((FIXTURES / "schema_migrations.sql").read_text())
    for number, name, filename in MIGRATIONS[:version]:
        database.executescript((FIXTURES / filename).read_text())
        database.execute(
            "insert into schema_migrations (version, name, applied_at) values (?, ?, ?)",
            (number, name, "2026-01-01T00:00:00.000Z"),
        )
    database.commit()
    return database


def insert(database: sqlite3.Connection, table: str, **values: Any) -> None:
    """One row; dicts and lists are stored as JSON text, as the original did."""
    values = {
        column: json.dumps(value) if isinstance(value, dict | list) else value
        for column, value in values.items()
    }
    columns = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    database.execute(f"insert into {table} ({columns}) values ({marks})", list(values.values()))


def insert_unchecked(database: sqlite3.Connection, table: str, **values: Any) -> None:
    """A row that breaks one of the source's own CHECKs (SQLite can be told to skip them, and
    old rows written before a CHECK existed look like this)."""
    database.execute("pragma ignore_check_constraints = on")
    insert(database, table, **values)
    database.execute("pragma ignore_check_constraints = off")
