"""``manage.py import_sqlite`` reading hostile files: text is read as bytes and decoded with
replacement, a failure names table, column and row but never quotes a value, views, triggers
and virtual tables refuse the file before anything is read through them, and reading is cut
off at a time limit — each run as the operator runs it, ``manage.py`` in its own process."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from config.embedded import database_url_for
from proxy.models import Account, ClientApiKey
from proxy.services.sqlite_import import BUSINESS_TABLES
from tests.conftest import project_environment, run_project
from tests.proxy.sqlite_v3 import build_source, fill_source

pytestmark = pytest.mark.subprocess

TOKEN = "at-SECRET-acc-active-0123456789"


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "codex-proxy.sqlite"
    database = build_source(path)
    fill_source(database)
    database.close()
    return path


def _edit(path: Path, *statements: str) -> None:
    """Change the file as a hostile copy could be changed (its own CHECKs not applied)."""
    database = sqlite3.connect(path)
    database.execute("pragma ignore_check_constraints = on")
    for statement in statements:
        database.execute(statement)
    database.commit()
    database.close()


def _import(path: Path, tmp_path: Path, *options: str):
    environment = project_environment(
        database_url_for(settings.DATABASES["default"], connection.settings_dict["NAME"]),
        tmp_path,
    )
    return run_project("manage.py", "import_sqlite", str(path), *options, environment=environment)


def _nothing_written() -> bool:
    with connection.cursor() as cursor:
        for table in BUSINESS_TABLES:
            cursor.execute(f"select exists (select 1 from {table})")  # noqa: S608
            if cursor.fetchone()[0]:
                return False
    return True


def test_an_invalid_utf8_byte_in_a_token_is_replaced_and_counted_never_quoted(
    source, tmp_path, transactional_db
):
    # The token's bytes with one that is not UTF-8 (0xff) in the middle, stored as TEXT.
    hexed = (TOKEN[:10].encode() + b"\xff" + TOKEN[10:].encode()).hex()
    _edit(
        source,
        f"update accounts set access_token = cast(x'{hexed}' as text) where id = 'acc_active'",
        "update accounts set label = 'A' || char(0) || 'B' where id = 'acc_active'",
    )

    imported = _import(source, tmp_path)

    assert imported.returncode == 0, imported.stderr
    assert "  accounts.access_token: invalid UTF-8 or NUL replaced by U+FFFD: 1" in (
        imported.stdout.splitlines()
    )
    assert "  accounts.label: invalid UTF-8 or NUL replaced by U+FFFD: 1" in imported.stdout
    account = Account.objects.get(pk="acc_active")
    assert account.access_token == TOKEN[:10] + "\ufffd" + TOKEN[10:]
    assert account.label == "A\ufffdB"
    assert TOKEN[10:] not in imported.stdout + imported.stderr


def test_a_failing_value_is_named_by_table_column_and_row_without_quoting_it(
    source, tmp_path, transactional_db
):
    _edit(source, f"update client_api_keys set enabled = '{TOKEN}' where id = 'key_on'")

    refused = _import(source, tmp_path)

    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "CommandError: import rolled back, nothing was written: client_api_keys row 'key_on': "
        f"enabled is a text of {len(TOKEN)} characters, not 0 or 1"
    )
    assert "SECRET" not in refused.stdout + refused.stderr
    assert _nothing_written()


@pytest.mark.parametrize(
    ("quota_json", "problem"),
    [
        ("[" * 5000 + "]" * 5000, "is JSON nested too deep"),
        ('{"note": "\\u0000 at-SECRET"}', "is JSON holding a NUL character or a lone surrogate"),
        ('{"note": "\\ud800 at-SECRET"}', "is JSON holding a NUL character or a lone surrogate"),
    ],
    ids=["nested-too-deep", "nul-escape", "lone-surrogate-escape"],
)
def test_json_postgresql_cannot_store_rolls_back_naming_the_column(
    source, tmp_path, transactional_db, quota_json, problem
):
    _edit(source, f"update accounts set quota_json = '{quota_json}' where id = 'acc_active'")

    refused = _import(source, tmp_path)

    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "CommandError: import rolled back, nothing was written: accounts row 'acc_active': "
        f"quota_json {problem}"
    )
    assert "Traceback" not in refused.stderr
    assert _nothing_written()


@pytest.mark.parametrize(
    ("statements", "found"),
    [
        (
            [
                "drop table schema_migrations",
                "create view schema_migrations as with recursive forever(version) as "
                "(select 1 union all select version + 1 from forever) select version from forever",
            ],
            "1 view(s)",
        ),
        (
            [
                "create trigger stamp after insert on accounts begin "
                "update accounts set label = 'x'; end"
            ],
            "1 trigger(s)",
        ),
        (["create virtual table notes using fts5(body)"], "1 virtual table(s)"),
    ],
    ids=["recursive-view-as-schema-migrations", "trigger", "virtual-table"],
)
def test_views_triggers_and_virtual_tables_refuse_the_file_at_once(
    source, tmp_path, transactional_db, statements, found
):
    _edit(source, *statements)
    started = time.monotonic()

    refused = _import(source, tmp_path)

    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"CommandError: import refused: {source} defines {found}, which the original's "
        "database never has; it is not read"
    )
    assert time.monotonic() - started < 60  # the recursive view is never run (it hung before)
    assert _nothing_written()


def test_reading_past_the_time_limit_rolls_back_everything(source, tmp_path, transactional_db):
    database = sqlite3.connect(source)
    database.executemany(
        "insert into usage_time_buckets (bucket_start, account_id, model, service_tier,"
        " request_count, error_count, input_tokens, output_tokens, cached_tokens,"
        " first_token_latency_sum, first_token_latency_count, latency_sum, latency_count,"
        " max_latency_ms, min_latency_ms, updated_at)"
        " values (?, 'acc_active', ?, 'default', 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, ?)",
        [("2026-07-08T12:00:00Z", f"model-{n}", "2026-07-08T12:00:00Z") for n in range(50_000)],
    )
    database.commit()
    database.close()

    refused = _import(source, tmp_path, "--time-limit", "0.01")

    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "CommandError: import rolled back, nothing was written: reading the source took longer "
        "than the time limit (0.01 s; --time-limit)"
    )
    assert _nothing_written()
    assert ClientApiKey.objects.count() == 0
