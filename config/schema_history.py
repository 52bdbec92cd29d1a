"""``schema_migrations`` (seed 004 §4.1): the project's applied-migration history with checksums.

Django's own ``django_migrations`` says *what* ran; this table pins *which file* ran. After every
``migrate`` each newly applied migration of the project's apps (``PROJECT_APPS``) gets the next
version number, its name ``<app>.<migration>`` and the SHA-256 of its file. Web, worker and beat
refuse to start (``verify_schema_history``) when:

* a recorded migration no longer exists in the code, or its file's checksum changed
  (a published migration must never be edited);
* the versions do not run 1..n, or a migration is recorded before one of its dependencies
  (the history is not an ordered prefix of the code's migration graph);
* the database is behind the code (unapplied migrations) or a migration Django applied was
  never recorded.

The table is created here, not by a migration, as the seed says ("由 database.rs 建库时创建").
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

PROJECT_APPS = ("proxy", "telemetry", "bots")

SCHEMA_MIGRATIONS_DDL = """
create table if not exists schema_migrations (
  version bigint not null check (version > 0),
  name text not null,
  checksum text not null,
  applied_at timestamptz not null default now(),
  primary key (version)
)
"""


class SchemaHistoryError(Exception):
    """The database's migration history does not match the code; the message names why."""


@dataclass(frozen=True)
class CodeMigration:
    name: str  # "<app>.<migration>"
    checksum: str  # SHA-256 hex of the migration file
    dependencies: tuple[str, ...]  # project-app dependencies, "<app>.<migration>"


def _file_checksum(app_label: str, migration_name: str) -> str:
    spec = importlib.util.find_spec(f"{app_label}.migrations.{migration_name}")
    # The migration loader found this module: it is a file of the app's migrations package.
    assert spec is not None and spec.origin is not None
    with open(spec.origin, "rb") as migration_file:
        return hashlib.sha256(migration_file.read()).hexdigest()


def code_migrations() -> list[CodeMigration]:
    """The project's migrations in the code, in a dependency-respecting (plan) order."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    ordered: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for leaf in sorted(graph.leaf_nodes()):
        for node in graph.forwards_plan(leaf):
            if node not in seen and node[0] in PROJECT_APPS:
                seen.add(node)
                ordered.append(node)
    return [
        CodeMigration(
            name=f"{app}.{name}",
            checksum=_file_checksum(app, name),
            dependencies=tuple(
                f"{dependency_app}.{dependency_name}"
                for dependency_app, dependency_name in graph.nodes[(app, name)].dependencies
                if dependency_app in PROJECT_APPS
            ),
        )
        for app, name in ordered
    ]


def _recorded(cursor) -> list[tuple[int, str, str]]:
    cursor.execute("select version, name, checksum from schema_migrations order by version")
    return cursor.fetchall()


def _applied_by_django(connection) -> set[str]:
    return {
        f"{app}.{name}"
        for app, name in MigrationRecorder(connection).applied_migrations()
        if app in PROJECT_APPS
    }


def record_schema_history(using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Append every applied-but-unrecorded project migration; return the names added."""
    connection = connections[using]
    applied = _applied_by_django(connection)
    with connection.cursor() as cursor:
        cursor.execute(SCHEMA_MIGRATIONS_DDL)
        recorded = _recorded(cursor)
        recorded_names = {name for _, name, _ in recorded}
        next_version = (recorded[-1][0] if recorded else 0) + 1
        added = []
        for migration in code_migrations():
            if migration.name in applied and migration.name not in recorded_names:
                cursor.execute(
                    "insert into schema_migrations (version, name, checksum) values (%s, %s, %s)",
                    [next_version, migration.name, migration.checksum],
                )
                added.append(migration.name)
                next_version += 1
    return added


def record_schema_history_after_migrate(sender, using: str = DEFAULT_DB_ALIAS, **kwargs) -> None:
    record_schema_history(using)


def verify_schema_history(using: str = DEFAULT_DB_ALIAS) -> None:
    """Raise SchemaHistoryError naming the first migration that breaks the rules above."""
    connection = connections[using]
    if "schema_migrations" not in connection.introspection.table_names():
        raise SchemaHistoryError("schema_migrations is missing; run `python manage.py migrate`")
    code = {migration.name: migration for migration in code_migrations()}
    with connection.cursor() as cursor:
        recorded = _recorded(cursor)
    seen: set[str] = set()
    for position, (version, name, checksum) in enumerate(recorded, start=1):
        if version != position:
            raise SchemaHistoryError(
                f"schema_migrations versions must run 1..n; found version {version} for {name} "
                f"at position {position}"
            )
        migration = code.get(name)
        if migration is None:
            raise SchemaHistoryError(
                f"applied migration {name} (version {version}) does not exist in this code; "
                "the database belongs to a different or newer release"
            )
        if migration.checksum != checksum:
            raise SchemaHistoryError(
                f"migration {name} (version {version}) was changed after it was applied: its "
                f"checksum is {migration.checksum[:12]}… but {checksum[:12]}… was recorded"
            )
        missing = [dependency for dependency in migration.dependencies if dependency not in seen]
        if missing:
            raise SchemaHistoryError(
                f"migration {name} (version {version}) is recorded before its dependency "
                f"{missing[0]}; the history is not an ordered prefix of the code's migrations"
            )
        seen.add(name)
    unrecorded = sorted(_applied_by_django(connection) - seen)
    if unrecorded:
        raise SchemaHistoryError(
            f"migration {unrecorded[0]} was applied but never recorded in schema_migrations; "
            "run `python manage.py migrate` to record it"
        )
    pending = [name for name in code if name not in seen]
    if pending:
        raise SchemaHistoryError(
            f"{len(pending)} migration(s) not applied yet (first: {pending[0]}); "
            "run `python manage.py migrate`"
        )
