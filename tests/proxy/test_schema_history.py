"""schema_migrations (seed 004 §4.1): recorded after migrate; start-up refuses a drifted history."""

from __future__ import annotations

import io
import re

import psycopg
import pytest
from django.db import connection

from config.schema_history import code_migrations, record_schema_history, verify_schema_history
from config.startup import StartupRefused, run_startup_checks
from tests.conftest import migrate_project, project_environment, run_project


def _recorded() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("select version, name, checksum from schema_migrations order by version")
        return cursor.fetchall()


@pytest.mark.django_db
def test_migrate_records_every_project_migration_in_order_with_its_checksum():
    expected = [
        (version, migration.name, migration.checksum)
        for version, migration in enumerate(code_migrations(), start=1)
    ]

    assert _recorded() == expected
    assert {name.split(".")[0] for _, name, _ in expected} >= {"proxy", "telemetry"}
    assert all(len(checksum) == 64 for _, _, checksum in expected)
    verify_schema_history()  # the freshly migrated database passes
    assert record_schema_history() == []  # recording again adds nothing


@pytest.mark.django_db
def test_a_tampered_checksum_stops_start_up_naming_the_migration():
    with connection.cursor() as cursor:
        cursor.execute("update schema_migrations set checksum = repeat('0', 64) where version = 1")
    first = _recorded()[0][1]

    with pytest.raises(StartupRefused) as refusal:
        run_startup_checks("web", out=io.StringIO())

    assert f"migration {first} (version 1) was changed after it was applied" in str(refusal.value)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "update schema_migrations set name = 'proxy.9999_from_the_future' where version = 1",
            "applied migration proxy.9999_from_the_future (version 1) does not exist in this code",
        ),
        ("delete from schema_migrations where version = 1", "versions must run 1..n"),
        (
            "delete from schema_migrations"
            " where version = (select max(version) from schema_migrations)",
            "was applied but never recorded in schema_migrations",
        ),
        (
            "delete from django_migrations where id = (select max(id) from django_migrations"
            " where app in ('proxy', 'telemetry', 'bots'));"
            "delete from schema_migrations"
            " where version = (select max(version) from schema_migrations)",
            "not applied yet",
        ),
    ],
)
def test_history_that_is_not_an_ordered_prefix_of_the_code_is_refused(statement, message):
    with connection.cursor() as cursor:
        cursor.execute(statement)

    with pytest.raises(StartupRefused, match=re.escape(message)):
        run_startup_checks("worker", out=io.StringIO())


@pytest.mark.subprocess
def test_the_real_web_entry_point_refuses_a_tampered_history(scratch_database, tmp_path):
    environment = project_environment(
        scratch_database, tmp_path, CPR_ADMIN_DEFAULT_PASSWORD="a long enough admin password"
    )
    migrate_project(environment)
    with psycopg.connect(scratch_database, autocommit=True) as database:
        database.execute("update schema_migrations set checksum = 'tampered' where version = 2")

    refused = run_project("-m", "config.run", "web", environment=environment)

    assert refused.returncode == 2
    assert "web: refusing to start: schema history: migration" in refused.stderr
    assert "(version 2) was changed after it was applied" in refused.stderr
