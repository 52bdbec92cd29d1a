"""Transactional tests end with the database a flush would leave, truncating only what they wrote.

Django's TransactionTestCase ends every test with ``flush``: one TRUNCATE of every table (≈32,
each a new file per table and index) and the post_migrate signal that recreates content types
and permissions, ≈0.27 s a test, nearly all of it for tables the test never touched. The end
state here is the same, found from the tables themselves (so writes of every connection count:
the live server's threads, a Celery worker process):

* the tables with rows are truncated, with the tables that reference them by a foreign key (a
  TRUNCATE of a referenced table needs them in the same statement, as the full one had them);
* the tables the full flush fills again (post_migrate: content types, permissions) are left as
  they are while their rows are exactly those the last full flush left;
* otherwise (the first test, or one that changed those tables) the full flush runs, as before.

Installed by tests/conftest.py; tests/foundation/test_table_cleanup.py shows writes still go.
"""

from __future__ import annotations

from django.core.management import call_command
from django.db import connections, transaction
from django.test import TransactionTestCase

_django_fixture_teardown = TransactionTestCase._fixture_teardown

# Per database alias: the fingerprint of every table that had rows right after the last full
# flush (the post_migrate rows), and which tables reference which by a foreign key.
_flushed_state: dict[str, dict[str, str]] = {}
_referencing: dict[str, dict[str, set[str]]] = {}


def _django_tables(connection) -> list[str]:
    return sorted(
        connection.introspection.django_table_names(only_existing=True, include_views=False)
    )


def _tables_with_rows(cursor, connection, tables: list[str]) -> set[str]:
    if not tables:
        return set()
    quote = connection.ops.quote_name
    cursor.execute(
        " union all ".join(
            f"select %s where exists (select 1 from {quote(table)})" for table in tables
        ),
        tables,
    )
    return {row[0] for row in cursor.fetchall()}


def _fingerprints(cursor, connection, tables: list[str]) -> dict[str, str]:
    if not tables:
        return {}
    quote = connection.ops.quote_name
    cursor.execute(
        " union all ".join(
            f"select %s, md5(coalesce(string_agg(t::text, ',' order by t::text), ''))"
            f" from {quote(table)} as t"
            for table in tables
        ),
        tables,
    )
    return dict(cursor.fetchall())


def _referencing_tables(cursor, alias: str) -> dict[str, set[str]]:
    """For each table, the tables whose foreign keys point at it (read once per database)."""
    if alias not in _referencing:
        cursor.execute(
            "select referenced.relname, referencing.relname from pg_constraint"
            " join pg_class as referencing on referencing.oid = pg_constraint.conrelid"
            " join pg_class as referenced on referenced.oid = pg_constraint.confrelid"
            " where pg_constraint.contype = 'f' and referencing.oid <> referenced.oid"
        )
        graph: dict[str, set[str]] = {}
        for referenced, referencing in cursor.fetchall():
            graph.setdefault(referenced, set()).add(referencing)
        _referencing[alias] = graph
    return _referencing[alias]


def _with_referencing(tables: set[str], graph: dict[str, set[str]]) -> set[str]:
    closure = set(tables)
    pending = list(tables)
    while pending:
        for referencing in graph.get(pending.pop(), ()):
            if referencing not in closure:
                closure.add(referencing)
                pending.append(referencing)
    return closure


def _full_flush(alias: str) -> None:
    """Django's own teardown for one database (its post_migrate included), then the state to
    compare later tests against."""
    call_command(
        "flush",
        verbosity=0,
        interactive=False,
        database=alias,
        reset_sequences=False,
        allow_cascade=False,
        inhibit_post_migrate=False,
    )
    connection = connections[alias]
    tables = _django_tables(connection)
    with connection.cursor() as cursor:
        filled = sorted(_tables_with_rows(cursor, connection, tables))
        _flushed_state[alias] = _fingerprints(cursor, connection, filled)


def clear_written_tables(alias: str = "default") -> None:
    """Leave database ``alias`` as ``flush`` (with post_migrate) would, truncating only the
    tables that have rows."""
    flushed = _flushed_state.get(alias)
    if flushed is None:
        _full_flush(alias)
        return
    connection = connections[alias]
    tables = _django_tables(connection)
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        if _fingerprints(cursor, connection, sorted(flushed)) == flushed:
            written = _tables_with_rows(cursor, connection, tables) - flushed.keys()
            truncated = _with_referencing(written, _referencing_tables(cursor, alias))
            truncated &= set(tables)
            if not truncated & flushed.keys():
                if truncated:
                    quote = connection.ops.quote_name
                    cursor.execute(
                        "truncate " + ", ".join(quote(table) for table in sorted(truncated))
                    )
                return
    _full_flush(alias)


def fixture_teardown(self) -> None:
    # available_apps and serialized_rollback change what the flush does: Django's own then.
    if self.available_apps is not None or self.serialized_rollback:
        _django_fixture_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):
        clear_written_tables(alias)


def install() -> None:
    TransactionTestCase._fixture_teardown = fixture_teardown
