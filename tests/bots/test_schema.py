"""The eight tables match the storage document (seed 000): names, columns, keys and indexes.

PostgreSQL renderings of the seed's D1 conventions: Telegram ids bigint, ISO timestamps
timestamptz, 0/1 flags boolean.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from bots.models import Broadcast, Topic

BIGINT, INTEGER, TEXT, BOOLEAN, TIMESTAMPTZ = (
    "bigint",
    "integer",
    "text",
    "boolean",
    "timestamp with time zone",
)

# (column, type, nullable) in the seed's order.
EXPECTED_COLUMNS = {
    "bots": [
        ("bot_id", BIGINT, False),
        ("username", TEXT, False),
        ("display_name", TEXT, False),
        ("created_at", TIMESTAMPTZ, False),
    ],
    "users": [
        ("bot_id", BIGINT, False),
        ("user_id", BIGINT, False),
        ("first_name", TEXT, False),
        ("last_name", TEXT, False),
        ("username", TEXT, False),
        ("status", TEXT, False),
        ("is_banned", BOOLEAN, False),
        ("is_risk", BOOLEAN, False),
        ("is_verified", BOOLEAN, False),
        ("verified_at", TIMESTAMPTZ, True),
        ("verify_answer", INTEGER, True),
        ("verify_msg_id", BIGINT, True),
        ("verify_request_hash", TEXT, True),
        ("verify_request_expires_at", TIMESTAMPTZ, True),
        ("verify_request_generation", BIGINT, True),
        ("verify_submit_not_before", TIMESTAMPTZ, True),
        ("rate_window_start", TIMESTAMPTZ, True),
        ("rate_count", INTEGER, False),
        ("last_notice_at", TIMESTAMPTZ, True),
        ("risk_notice_at", TIMESTAMPTZ, True),
        ("first_seen_at", TIMESTAMPTZ, False),
        ("last_seen_at", TIMESTAMPTZ, False),
    ],
    "topics": [
        ("bot_id", BIGINT, False),
        ("user_id", BIGINT, False),
        ("thread_id", BIGINT, False),
        ("title", TEXT, False),
        ("status", TEXT, False),
        ("pinned_msg_id", BIGINT, True),
        ("note", TEXT, True),
        ("created_at", TIMESTAMPTZ, False),
        ("closed_at", TIMESTAMPTZ, True),
    ],
    "messages": [
        ("id", BIGINT, False),
        ("bot_id", BIGINT, False),
        ("user_id", BIGINT, False),
        ("thread_id", BIGINT, False),
        ("direction", TEXT, False),
        ("group_msg_id", BIGINT, True),
        ("private_msg_id", BIGINT, True),
        ("content_type", TEXT, False),
        ("created_at", TIMESTAMPTZ, False),
    ],
    "settings": [("key", TEXT, False), ("value", TEXT, False)],
    "processed_updates": [
        ("bot_id", BIGINT, False),
        ("update_id", BIGINT, False),
        ("status", TEXT, False),
        ("attempts", INTEGER, False),
        ("created_at", TIMESTAMPTZ, False),
    ],
    "delete_confirmations": [
        ("bot_id", BIGINT, False),
        ("prompt_msg_id", BIGINT, False),
        ("user_id", BIGINT, False),
        ("thread_id", BIGINT, False),
        ("started_at", BIGINT, False),
        ("status", TEXT, False),
        ("confirm_callback_id", TEXT, True),
    ],
    "broadcasts": [
        ("id", BIGINT, False),
        ("bot_id", BIGINT, False),
        ("source_update_id", BIGINT, False),
        ("initiator_user_id", BIGINT, False),
        ("support_chat_id", BIGINT, False),
        ("preview_msg_id", BIGINT, True),
        ("control_msg_id", BIGINT, True),
        ("message_html", TEXT, False),
        ("recipient_ids_json", TEXT, False),
        ("status", TEXT, False),
        ("expected_count", INTEGER, False),
        ("success_count", INTEGER, False),
        ("failure_count", INTEGER, False),
        ("expires_at", TIMESTAMPTZ, False),
        ("confirmed_at", TIMESTAMPTZ, True),
        ("created_at", TIMESTAMPTZ, False),
        ("updated_at", TIMESTAMPTZ, False),
    ],
}

# Every index of the eight tables: the keys, the seed's unique pairs, the two ledger indexes and
# the two partial unique indexes of broadcasts — and nothing else (no implicit Django indexes).
EXPECTED_INDEXES = {
    "bots_pkey": "CREATE UNIQUE INDEX bots_pkey ON public.bots USING btree (bot_id)",
    "users_pkey": "CREATE UNIQUE INDEX users_pkey ON public.users USING btree (bot_id, user_id)",
    "topics_pkey": "CREATE UNIQUE INDEX topics_pkey ON public.topics USING btree (bot_id, user_id)",
    "topics_bot_id_thread_id_key": (
        "CREATE UNIQUE INDEX topics_bot_id_thread_id_key ON public.topics "
        "USING btree (bot_id, thread_id)"
    ),
    "messages_pkey": "CREATE UNIQUE INDEX messages_pkey ON public.messages USING btree (id)",
    "idx_messages_thread_created": (
        "CREATE INDEX idx_messages_thread_created ON public.messages "
        "USING btree (thread_id, created_at)"
    ),
    "idx_messages_user_created": (
        "CREATE INDEX idx_messages_user_created ON public.messages "
        "USING btree (user_id, created_at)"
    ),
    "settings_pkey": "CREATE UNIQUE INDEX settings_pkey ON public.settings USING btree (key)",
    "processed_updates_pkey": (
        "CREATE UNIQUE INDEX processed_updates_pkey ON public.processed_updates "
        "USING btree (bot_id, update_id)"
    ),
    "delete_confirmations_pkey": (
        "CREATE UNIQUE INDEX delete_confirmations_pkey ON public.delete_confirmations "
        "USING btree (bot_id, prompt_msg_id)"
    ),
    "broadcasts_pkey": "CREATE UNIQUE INDEX broadcasts_pkey ON public.broadcasts USING btree (id)",
    "broadcasts_bot_id_source_update_id_key": (
        "CREATE UNIQUE INDEX broadcasts_bot_id_source_update_id_key ON public.broadcasts "
        "USING btree (bot_id, source_update_id)"
    ),
    "idx_broadcasts_active_sending": (
        "CREATE UNIQUE INDEX idx_broadcasts_active_sending ON public.broadcasts "
        "USING btree (bot_id) WHERE (status = 'sending'::text)"
    ),
    "idx_broadcasts_active_draft": (
        "CREATE UNIQUE INDEX idx_broadcasts_active_draft ON public.broadcasts "
        "USING btree (bot_id) WHERE (status = ANY (ARRAY['preparing'::text, 'pending'::text]))"
    ),
}


def _query(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@pytest.mark.django_db
@pytest.mark.parametrize("table", sorted(EXPECTED_COLUMNS))
def test_table_has_the_seed_columns_with_postgres_types(table):
    columns = _query(
        "select column_name, data_type, is_nullable = 'YES' from information_schema.columns "
        "where table_schema = current_schema() and table_name = %s order by ordinal_position",
        [table],
    )

    assert columns == EXPECTED_COLUMNS[table]


@pytest.mark.django_db
def test_the_eight_tables_have_exactly_the_seed_indexes():
    indexes = dict(
        _query(
            "select indexname, indexdef from pg_indexes "
            "where schemaname = current_schema() and tablename = any(%s)",
            [list(EXPECTED_COLUMNS)],
        )
    )

    assert indexes == EXPECTED_INDEXES


@pytest.mark.django_db
def test_column_defaults_are_in_the_database():
    with connection.cursor() as cursor:
        cursor.execute("insert into users (bot_id, user_id) values (1, 2)")
        cursor.execute(
            "select first_name, last_name, username, status, is_banned, is_risk, is_verified, "
            "rate_count, first_seen_at is not null from users where bot_id = 1"
        )
        user = cursor.fetchone()
        cursor.execute("insert into topics (bot_id, user_id, thread_id) values (1, 2, 3)")
        cursor.execute("select title, status, created_at is not null from topics")
        topic = cursor.fetchone()
        cursor.execute(
            "insert into processed_updates (bot_id, update_id, status) values (1, 9, 'processing')"
        )
        cursor.execute("select attempts from processed_updates")
        attempts = cursor.fetchone()

    assert user == ("", "", "", "active", False, False, False, 0, True)
    assert topic == ("", "open", True)
    assert attempts == (0,)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "statement",
    [
        "insert into users (bot_id, user_id, status) values (1, 2, 'archived')",
        "insert into topics (bot_id, user_id, thread_id, status) values (1, 2, 3, 'gone')",
        "insert into messages (bot_id, user_id, thread_id, direction) values (1, 2, 3, 'up')",
        "insert into processed_updates (bot_id, update_id, status) values (1, 2, 'done')",
        "insert into delete_confirmations (bot_id, prompt_msg_id, user_id, thread_id, started_at,"
        " status) values (1, 2, 3, 4, 5, 'maybe')",
        "insert into broadcasts (bot_id, source_update_id, initiator_user_id, support_chat_id,"
        " message_html, expires_at, status) values (1, 2, 3, 4, 'x', now(), 'queued')",
        "insert into broadcasts (bot_id, source_update_id, initiator_user_id, support_chat_id,"
        " message_html, expires_at, success_count) values (1, 2, 3, 4, 'x', now(), -1)",
    ],
)
def test_enumerated_values_are_checked(statement):
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)


@pytest.mark.django_db
def test_a_thread_belongs_to_one_user_and_a_user_to_one_thread():
    Topic.objects.create(bot_id=1, user_id=10, thread_id=100, title="a")

    with pytest.raises(IntegrityError), transaction.atomic():
        Topic.objects.create(bot_id=1, user_id=11, thread_id=100, title="b")
    with pytest.raises(IntegrityError), transaction.atomic():
        Topic.objects.create(bot_id=1, user_id=10, thread_id=101, title="c")
    # Another bot may reuse both numbers.
    Topic.objects.create(bot_id=2, user_id=10, thread_id=100, title="d")
    assert Topic.objects.count() == 2


def _broadcast(source_update_id: int, status: str) -> Broadcast:
    return Broadcast.objects.create(
        bot_id=1,
        source_update_id=source_update_id,
        initiator_user_id=5,
        support_chat_id=-100,
        message_html="x",
        status=status,
        expires_at="2026-10-01T00:00:00Z",
    )


@pytest.mark.django_db
def test_one_sending_and_one_draft_broadcast_per_bot():
    _broadcast(1, "sending")
    _broadcast(2, "pending")  # a draft may coexist with a sending broadcast
    _broadcast(3, "completed")
    _broadcast(4, "completed")

    with pytest.raises(IntegrityError), transaction.atomic():
        _broadcast(5, "sending")
    with pytest.raises(IntegrityError), transaction.atomic():
        _broadcast(6, "preparing")
    with pytest.raises(IntegrityError), transaction.atomic():
        _broadcast(1, "cancelled")  # the same source update twice
    assert Broadcast.objects.count() == 4


# ------------------------------------------------------------------ beside the seed's eight

# The bot's own tables, each in a migration of its own (the seed's eight stay exactly as the
# seed says): the audit trail (0003), albums waiting to be sent (0004), and the inbox of
# accepted updates not finished yet (0006, issue 36).
OUR_TABLES = {"admin_audit_log", "album_items", "update_inbox"}


@pytest.mark.django_db
def test_the_bot_has_the_seeds_eight_tables_and_its_own_three_and_no_other():
    from django.apps import apps

    tables = {
        model._meta.db_table
        for model in apps.get_app_config("bots").get_models()
        if model._meta.managed
    }

    assert tables == set(EXPECTED_COLUMNS) | OUR_TABLES
    existing = {
        name
        for (name,) in _query(
            "select table_name from information_schema.tables where table_schema = current_schema()"
            " and table_name = any(%s)",
            [sorted(tables)],
        )
    }
    assert existing == tables


@pytest.mark.django_db
def test_the_inbox_table_has_its_columns_keys_and_index():
    columns = _query(
        "select column_name, data_type, is_nullable = 'YES' from information_schema.columns "
        "where table_schema = current_schema() and table_name = 'update_inbox' "
        "order by ordinal_position",
        [],
    )
    indexes = dict(
        _query(
            "select indexname, indexdef from pg_indexes "
            "where schemaname = current_schema() and tablename = 'update_inbox'",
            [],
        )
    )

    assert columns == [
        ("bot_id", BIGINT, False),
        ("update_id", BIGINT, False),
        ("conversation_user_id", BIGINT, True),
        ("media_group_id", TEXT, True),
        ("payload", "jsonb", False),
        ("origin", TEXT, True),
        ("attempts", INTEGER, False),
        ("waits", INTEGER, False),
        ("settled", "jsonb", False),
        ("not_before", TIMESTAMPTZ, False),
        ("lease_token", TEXT, True),
        ("lease_expires_at", TIMESTAMPTZ, True),
        ("last_error", TEXT, False),
        ("created_at", TIMESTAMPTZ, False),
    ]
    assert indexes == {
        "update_inbox_pkey": (
            "CREATE UNIQUE INDEX update_inbox_pkey ON public.update_inbox "
            "USING btree (bot_id, update_id)"
        ),
        "idx_update_inbox_conversation": (
            "CREATE INDEX idx_update_inbox_conversation ON public.update_inbox "
            "USING btree (bot_id, conversation_user_id, update_id)"
        ),
    }
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "insert into update_inbox (bot_id, update_id, payload, attempts)"
            " values (1, 2, '{}', -1)"
        )
