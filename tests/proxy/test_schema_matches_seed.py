"""The migrated schema equals seed 004's DDL: tables, columns, types, nullability, defaults,
CHECKs, unique/partial/descending indexes and foreign keys — nothing missing, nothing extra."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from django.db import connection

SEED_SQL = Path(__file__).parent / "fixtures" / "seed_004_schema.sql"
SEED_TABLES = (
    "schema_migrations",
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
# Deliberate, documented deviations: Django's last_login on the admin (foundation issue).
ALLOWED_EXTRA_COLUMNS = {("admin_users", "last_login")}

COLUMNS_SQL = """
select table_name, column_name, data_type, is_nullable, column_default
from information_schema.columns
where table_schema = 'public' and table_name = any(%s)
order by table_name, ordinal_position
"""
CONSTRAINTS_SQL = """
select cls.relname, con.conname, con.contype, pg_get_constraintdef(con.oid)
from pg_constraint con join pg_class cls on cls.oid = con.conrelid
join pg_namespace ns on ns.oid = cls.relnamespace
where ns.nspname = 'public' and cls.relname = any(%s)
"""
INDEXES_SQL = """
select tablename, indexname, indexdef from pg_indexes
where schemaname = 'public' and tablename = any(%s)
"""


def _catalog(cursor) -> dict[str, object]:
    tables = list(SEED_TABLES)
    cursor.execute(COLUMNS_SQL, [tables])
    columns: dict[str, list[tuple]] = {}
    for table, column, data_type, nullable, default in cursor.fetchall():
        if (table, column) not in ALLOWED_EXTRA_COLUMNS:
            columns.setdefault(table, []).append((column, data_type, nullable, default))
    cursor.execute(CONSTRAINTS_SQL, [tables])
    constraints = set(cursor.fetchall())
    cursor.execute(INDEXES_SQL, [tables])
    indexes = set(cursor.fetchall())
    return {"columns": columns, "constraints": constraints, "indexes": indexes}


@pytest.fixture
def seed_catalog(scratch_database):
    with psycopg.connect(scratch_database, autocommit=True) as seed_db:
        seed_db.execute(SEED_SQL.read_text())
        with seed_db.cursor() as cursor:
            return _catalog(cursor)


@pytest.mark.django_db
def test_migrated_catalog_equals_the_seed_ddl(seed_catalog):
    with connection.cursor() as cursor:
        migrated = _catalog(cursor.cursor)

    assert sorted(migrated["columns"]) == sorted(SEED_TABLES)
    for table in SEED_TABLES:
        assert migrated["columns"][table] == seed_catalog["columns"][table], table
    assert migrated["constraints"] - seed_catalog["constraints"] == set(), "extra constraints"
    assert seed_catalog["constraints"] - migrated["constraints"] == set(), "missing constraints"
    assert migrated["indexes"] - seed_catalog["indexes"] == set(), "extra indexes"
    assert seed_catalog["indexes"] - migrated["indexes"] == set(), "missing indexes"


def test_the_seed_fixture_is_the_seed_verbatim():
    """Guard against someone 'fixing' the fixture to match the code."""
    text = SEED_SQL.read_text()
    assert text.count("create table") == len(SEED_TABLES)
    assert "on accounts(chatgpt_account_id, coalesce(chatgpt_user_id, ''))" in text
