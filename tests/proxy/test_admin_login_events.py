"""The log-in audit's rows (``admin_login_events``, seed 004 §8): ids as seed §2.4 wants every
id (text generated in code, never a database sequence), written by many workers at once and
read by the console newest first, page after page; and the migration that moved rows written
under the bigint ids of 0002 to them."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.contrib import admin as django_admin
from django.db import connection
from django.test import Client
from django.utils import timezone

from proxy.models import AdminLoginEvent
from proxy.services.admin_login import LoginOutcome, admin_login_attempt
from proxy.services.admin_users import admin_user_create_default
from tests.conftest import project_environment, run_project

PASSWORD = "correct horse battery staple"
LOGIN_EVENT_ID = re.compile(r"login_[0-9a-f]{32}")


def _column(table: str, column: str) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(
            "select data_type, column_default, is_identity from information_schema.columns"
            " where table_name = %s and column_name = %s",
            [table, column],
        )
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_concurrent_log_ins_on_both_surfaces_get_text_ids_and_page_newest_first(settings):
    admin_user_create_default(password=PASSWORD, now=datetime.now(UTC))
    start = threading.Barrier(8)
    outcomes: list[LoginOutcome] = []

    def attempt(index: int) -> None:
        start.wait()
        try:
            result = admin_login_attempt(
                username="admin" if index % 4 == 0 else f"intruder{index}",
                password=f"wrong password {index}",
                client_ip=f"198.51.100.{index}",
                user_agent="probe",
                surface=("admin", "api")[index % 2],
                now=timezone.now(),
            )
            outcomes.append(result.outcome)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes == [LoginOutcome.INVALID] * 8
    ids = list(AdminLoginEvent.objects.values_list("id", flat=True))
    assert len(ids) == len(set(ids)) == 8
    assert all(LOGIN_EVENT_ID.fullmatch(event_id) for event_id in ids), ids
    # Seed §2.4: the id is text from the code, no sequence or identity behind it.
    assert _column("admin_login_events", "id") == ("text", None, "NO")
    assert _column("admin_login_events", "locked_out") == ("boolean", "false", "NO")

    # The console, three rows a page: every row exactly once, newest first.
    newest_first = list(
        AdminLoginEvent.objects.order_by("-created_at", "-id").values_list("id", flat=True)
    )
    operator = Client()
    operator.post("/admin/login/", {"username": settings.CPR_ADMIN_USERNAME, "password": PASSWORD})
    newest_first.insert(0, AdminLoginEvent.objects.get(surface="admin", outcome="success").id)
    model_admin = django_admin.site._registry[AdminLoginEvent]
    listed: list[str] = []
    original = model_admin.list_per_page
    model_admin.list_per_page = 3
    try:
        for page in (1, 2, 3):
            response = operator.get("/admin/proxy/adminloginevent/", {"p": page})
            assert response.status_code == 200
            listed += [row.id for row in response.context["cl"].result_list]
    finally:
        model_admin.list_per_page = original
    assert listed == newest_first


@pytest.mark.subprocess
def test_the_migration_gives_rows_written_under_bigint_ids_text_ids(scratch_database, tmp_path):
    environment = project_environment(scratch_database, tmp_path)
    to_0002 = run_project(
        "manage.py", "migrate", "proxy", "0002", "--noinput", environment=environment
    )
    assert to_0002.returncode == 0, to_0002.stderr
    earlier = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    with psycopg.connect(scratch_database, autocommit=True) as database:
        for minutes in (0, 1, 2):
            database.execute(
                "insert into admin_login_events (created_at, surface, outcome, locked_out)"
                " values (%s, 'admin', 'failure', %s)",
                [earlier + timedelta(minutes=minutes), minutes == 2],
            )
        before = database.execute(
            "select id::text, created_at, locked_out from admin_login_events order by id"
        ).fetchall()

    migrated = run_project("manage.py", "migrate", "--noinput", environment=environment)

    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(scratch_database, autocommit=True) as database:
        after = database.execute(
            "select id, created_at, locked_out from admin_login_events"
            " order by created_at desc, id desc"
        ).fetchall()
        # A row written without locked_out (a future writer) gets the database's default.
        database.execute(
            "insert into admin_login_events (id, created_at, surface, outcome)"
            " values ('login_00000000000000000000000000000000', now(), 'api', 'success')"
        )
        (default_locked_out,) = database.execute(
            "select locked_out from admin_login_events where surface = 'api'"
        ).fetchone()
    assert [event_id for event_id, _, _ in before] == ["1", "2", "3"]
    assert [(created_at, locked) for _, created_at, locked in after] == [
        (created_at, locked) for _, created_at, locked in reversed(before)
    ]
    assert all(LOGIN_EVENT_ID.fullmatch(event_id) for event_id, _, _ in after)
    assert len({event_id for event_id, _, _ in after}) == 3
    assert default_locked_out is False
