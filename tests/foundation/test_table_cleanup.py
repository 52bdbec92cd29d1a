"""Transactional tests truncate only the tables they wrote (tests/table_cleanup.py), and still
leave every table as Django's flush would: the writes of any connection gone, the post_migrate
rows in place."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import TransactionTestCase
from django.utils import timezone

from bots.models import Bot, BotUser
from config.embedded import database_url_for
from proxy.models import Account, AccountStatus
from tests import table_cleanup

pytestmark = pytest.mark.django_db(transaction=True)


def post_migrate_rows() -> tuple[int, int]:
    return ContentType.objects.count(), Permission.objects.count()


def test_transactional_tests_use_the_narrow_cleanup():
    assert TransactionTestCase._fixture_teardown is table_cleanup.fixture_teardown


def test_rows_of_this_connection_are_truncated_and_post_migrate_rows_kept():
    table_cleanup.clear_written_tables()
    before = post_migrate_rows()
    assert before[0] > 0 and before[1] > 0
    Bot.objects.create(bot_id=1, username="guard")
    BotUser.objects.create(bot_id=1, user_id=5)

    table_cleanup.clear_written_tables()

    assert not Bot.objects.exists()
    assert not BotUser.objects.exists()
    assert post_migrate_rows() == before


def test_rows_committed_by_another_connection_are_truncated():
    # The live server's threads and Celery worker processes write through their own connections.
    table_cleanup.clear_written_tables()
    url = database_url_for(settings.DATABASES["default"], connection.settings_dict["NAME"])
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("insert into bots (bot_id, username) values (2, 'elsewhere')")

    table_cleanup.clear_written_tables()

    assert not Bot.objects.exists()


def test_a_referenced_table_is_truncated_with_the_tables_referencing_it():
    # account_usage references accounts by a foreign key: a TRUNCATE of accounts alone fails.
    table_cleanup.clear_written_tables()
    now = timezone.now()
    Account.objects.create(
        id="acc-guard", access_token="t", status=AccountStatus.ACTIVE, added_at=now, updated_at=now
    )

    table_cleanup.clear_written_tables()

    assert not Account.objects.exists()


def test_a_change_to_the_post_migrate_rows_runs_the_full_flush():
    table_cleanup.clear_written_tables()
    before = post_migrate_rows()
    ContentType.objects.filter(app_label="bots").delete()
    Bot.objects.create(bot_id=3)

    table_cleanup.clear_written_tables()

    ContentType.objects.clear_cache()
    assert post_migrate_rows() == before
    assert ContentType.objects.filter(app_label="bots").exists()
    assert not Bot.objects.exists()
