"""``manage.py import_sqlite``: the original's SQLite v3 database into PostgreSQL (seed 004 §6).

The source is built from the original's schema with one row per rule of §6.2/§6.3; the rows
expected in PostgreSQL are written out by hand below, not derived from the import's code.
"""

from __future__ import annotations

import hashlib
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from proxy.models import (
    Account,
    AccountCookie,
    AccountUsage,
    AdminUser,
    ClientApiKey,
    Fingerprint,
    FingerprintUpdateHistory,
    RuntimeSettings,
)
from proxy.services.sqlite_import import BUSINESS_TABLES
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from tests.conftest import migrate_project, project_environment, run_project
from tests.proxy.sqlite_v3 import (
    ADMIN_PASSWORD,
    NOW,
    OLD_SLOT,
    ORIGINAL_HASH,
    SLOT,
    build_source,
    fill_source,
    insert,
    insert_unchecked,
    z,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "codex-proxy.sqlite"
    database = build_source(path)
    fill_source(database)
    database.close()
    return path


def run_import(path: Path) -> str:
    out = io.StringIO()
    call_command("import_sqlite", str(path), stdout=out, stderr=io.StringIO())
    return out.getvalue()


def table_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for table in BUSINESS_TABLES:
            cursor.execute(f"select count(*) from {table}")
            counts[table] = cursor.fetchone()[0]
    return counts


def test_imports_every_table_by_the_seeds_rules(source):
    before = hashlib.sha256(source.read_bytes()).hexdigest()

    output = run_import(source)

    assert hashlib.sha256(source.read_bytes()).hexdigest() == before  # opened read-only
    t0 = SLOT + timedelta(minutes=1)
    # (digits past the microsecond are dropped; +08:00 times arrive as the same UTC instant)
    assert list(AdminUser.objects.values_list("id", "password", "created_at", "updated_at")) == [
        ("admin_1", "argon2" + ORIGINAL_HASH, t0, t0)
    ]
    assert AdminUser.objects.get().check_password(ADMIN_PASSWORD)  # the original's password

    assert list(ClientApiKey.objects.order_by("id").values()) == [
        {"id": "key_off", "name": "old", "prefix": "sk_zzz", "key": "sk_zzzfull", "label": None,
         "enabled": False, "created_at": t0, "last_used_at": None},
        {"id": "key_on", "name": "laptop", "prefix": "sk_abc123def4", "key": "sk_abc123def4full",
         "label": "codex", "enabled": True, "created_at": t0,
         "last_used_at": t0 + timedelta(hours=1)},
    ]  # fmt: skip
    assert list(RuntimeSettings.objects.values()) == [
        {"id": 1, "model_aliases_json": {"fast": "gpt-5.4-mini"}, "refresh_margin_seconds": 1800,
         "refresh_concurrency": 4, "max_concurrent_per_account": 5, "request_interval_ms": 0,
         "rotation_strategy": "quota_reset_priority",
         "admin_api_key_hash": hashlib.sha256(b"admin-0123456789abcdef").hexdigest(),
         "usage_retention_days": 30, "ops_error_retention_days": 30,
         "bucket_retention_days": 90, "updated_at": t0},
    ]  # fmt: skip
    assert list(Account.objects.order_by("id").values()) == [
        {"id": "acc_active", "email": "a@example.com", "chatgpt_account_id": "org-a",
         "chatgpt_user_id": "user-a", "label": "A", "plan_type": "pro", "access_token": "at-a",
         "refresh_token": "rt-a", "access_token_expires_at": NOW,
         "next_refresh_at": NOW - timedelta(hours=1), "status": "active",
         "quota_json": {"primary": {"used_percent": 12}}, "quota_fetched_at": t0,
         "quota_limit_reached": True, "quota_verify_required": False,
         "quota_cooldown_until": NOW, "cloudflare_cooldown_until": None, "added_at": t0,
         "updated_at": t0},
        {"id": "acc_refreshing", "email": None, "chatgpt_account_id": "org-r",
         "chatgpt_user_id": None, "label": None, "plan_type": "plus", "access_token": "at-r",
         "refresh_token": "rt-r", "access_token_expires_at": t0, "next_refresh_at": None,
         "status": "expired", "quota_json": None, "quota_fetched_at": None,
         "quota_limit_reached": False, "quota_verify_required": True,
         "quota_cooldown_until": None, "cloudflare_cooldown_until": NOW,
         "added_at": t0 + timedelta(seconds=1), "updated_at": t0},
    ]  # fmt: skip
    usage_row = AccountUsage.objects.values().get()
    assert usage_row == {
        "account_id": "acc_active", "request_count": 7, "empty_response_count": 1,
        "input_tokens": 700, "output_tokens": 70, "cached_tokens": 7, "reasoning_tokens": 3,
        "total_tokens": 770, "image_input_tokens": 0, "image_output_tokens": 0,
        "image_request_count": 0, "image_request_failed_count": 0, "window_request_count": 2,
        "window_input_tokens": 200, "window_output_tokens": 20, "window_cached_tokens": 2,
        "window_image_input_tokens": 0, "window_image_output_tokens": 0,
        "window_image_request_count": 0, "window_image_request_failed_count": 0,
        "window_started_at": t0, "window_reset_at": NOW, "limit_window_seconds": 18000,
        "last_used_at": t0,
    }  # fmt: skip
    assert list(AccountCookie.objects.order_by("id").values_list("id", "expires_at")) == [
        ("ck_garbage", None),  # unparseable: a session cookie now (counted below)
        ("ck_rfc2822", datetime(2026, 10, 21, 7, 28, tzinfo=UTC)),
        ("ck_rfc3339", datetime(2027, 3, 1, 10, 0, tzinfo=UTC)),
        ("ck_session", None),
    ]
    assert AccountCookie.objects.get(id="ck_rfc2822").value == "value-ck_rfc2822"
    assert list(Fingerprint.objects.values()) == [
        {"id": "current", "originator": "Codex Desktop", "app_version": "26.519.81530",
         "build_number": "3178", "platform": "darwin", "arch": "arm64",
         "chromium_version": "138.0.7204.251", "user_agent_template": "Codex/{version}",
         "default_headers_json": {"accept-language": "en-US"},
         "header_order_json": ["user-agent", "accept"], "source": "appcast", "created_at": t0,
         "updated_at": t0},
    ]  # fmt: skip
    assert list(
        FingerprintUpdateHistory.objects.order_by("id").values_list(
            "id", "chromium_version", "manifest_json", "created_at"
        )
    ) == [
        ("fph_1", None, {"version": "26.519.81530"}, t0),
        ("fph_2", "137.0", None, t0 - timedelta(days=1)),
    ]

    def at(minutes: int) -> datetime:
        return SLOT + timedelta(minutes=minutes)

    common = {"client_api_key_id": None, "kind": "v1.response", "route": "/v1/responses",
              "provider": "openai", "transport": "http", "attempt_index": 0,
              "upstream_request_id": None}  # fmt: skip
    assert list(UsageRecord.objects.order_by("created_at").values()) == [
        {**common, "id": "s_camel", "request_id": "req_s_camel", "account_id": "acc_active",
         "model": "gpt-5.4", "requested_model": "fast", "upstream_model": "gpt-5.4-mini",
         "service_tier": "priority", "status_code": 200, "response_id": "resp_s_camel",
         "latency_ms": 900, "first_token_ms": 310, "input_tokens": 100, "output_tokens": 20,
         "cached_tokens": 40, "reasoning_tokens": 5, "message": "message s_camel",
         "metadata_json": {"apiKind": "responses", "clientIp": "203.0.113.9",
                           "reasoningEffort": "high"},
         "created_at": at(2)},
        {**common, "id": "s_snake", "request_id": "req_s_snake", "account_id": "acc_active",
         "model": "gpt-5.4", "requested_model": "gpt-5.4", "upstream_model": None,
         "service_tier": None, "status_code": 399, "response_id": "resp_s_snake",
         "latency_ms": 0, "first_token_ms": None, "input_tokens": 10, "output_tokens": 4,
         "cached_tokens": 0, "reasoning_tokens": 1, "message": "message s_snake",
         "metadata_json": {"userAgent": "codex-cli"}, "created_at": at(3)},
        {**common, "id": "s_fallback", "request_id": "req_s_fallback",
         "account_id": "acc_refreshing", "model": "gpt-5.4-mini", "requested_model": None,
         "upstream_model": None, "service_tier": None, "status_code": 201,
         "response_id": "resp_s_fallback", "latency_ms": None, "first_token_ms": None,
         "input_tokens": None, "output_tokens": 7, "cached_tokens": None,
         "reasoning_tokens": None, "message": "message s_fallback", "metadata_json": {},
         "created_at": at(20)},
    ]  # fmt: skip
    assert list(OpsErrorLog.objects.order_by("created_at").values()) == [
        {"id": "e_rate", "request_id": "req_e_rate", "client_api_key_id": None,
         "kind": "v1.response", "provider": "openai", "account_id": "acc_active",
         "route": "/v1/responses", "model": "gpt-5.4", "status_code": 429,
         "client_status_code": None, "upstream_status_code": 429, "transport": "http",
         "attempt_index": 0, "failure_class": "rate_limited", "response_id": "resp_e_rate",
         "upstream_request_id": "up_1", "latency_ms": 900, "message": "message e_rate",
         "metadata_json": {"retryAfter": 30, "usage": {"inputTokens": 5}},
         "created_at": at(4)},
        {"id": "e_early", "request_id": "req_e_early", "client_api_key_id": None,
         "kind": "v1.response", "provider": "openai", "account_id": None,
         "route": "/v1/responses", "model": None, "status_code": None,
         "client_status_code": None, "upstream_status_code": None, "transport": None,
         "attempt_index": None, "failure_class": None, "response_id": None,
         "upstream_request_id": None, "latency_ms": None, "message": "message e_early",
         "metadata_json": {"reason": "no accounts"}, "created_at": at(5)},
        {"id": "ops_v3", "request_id": "req_ops", "client_api_key_id": None,
         "kind": "v1.response", "provider": "openai", "account_id": "acc_active",
         "route": "/v1/responses", "model": "gpt-5.4", "status_code": 502,
         "client_status_code": 502, "upstream_status_code": 503, "transport": "http",
         "attempt_index": 1, "failure_class": "upstream_unavailable", "response_id": None,
         "upstream_request_id": "up_2", "latency_ms": 1500, "message": "upstream 503",
         "metadata_json": {"body": "busy"}, "created_at": at(7)},
    ]  # fmt: skip
    updated = SLOT + timedelta(minutes=14)
    assert sorted(
        RequestTimeBucket.objects.values(), key=lambda row: (row["bucket_start"], row["account_id"])
    ) == [
        {"bucket_start": OLD_SLOT, "provider": "openai", "account_id": "__unknown__",
         "model": "__unknown__", "service_tier": "__unknown__", "success_count": 0,
         "error_count": 3, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
         "first_token_latency_sum": 0, "first_token_latency_count": 0, "latency_sum": 0,
         "latency_count": 0, "max_latency_ms": 0, "min_latency_ms": None,
         "updated_at": updated},
        {"bucket_start": OLD_SLOT, "provider": "openai", "account_id": "acc_active",
         "model": "gpt-5.4", "service_tier": "priority", "success_count": 8, "error_count": 2,
         "input_tokens": 1000, "output_tokens": 100, "cached_tokens": 10,
         "first_token_latency_sum": 900, "first_token_latency_count": 3, "latency_sum": 8000,
         "latency_count": 8, "max_latency_ms": 2000, "min_latency_ms": 120,
         "updated_at": updated},
        {"bucket_start": SLOT, "provider": "openai", "account_id": "acc_active",
         "model": "gpt-5.4", "service_tier": "__unknown__", "success_count": 2,
         "error_count": 1, "input_tokens": 560, "output_tokens": 0, "cached_tokens": 0,
         "first_token_latency_sum": 0, "first_token_latency_count": 0, "latency_sum": 130,
         "latency_count": 3, "max_latency_ms": 60, "min_latency_ms": 30,
         "updated_at": updated},
    ]  # fmt: skip

    report = output.splitlines()
    assert report[0].startswith(f"imported {source} (SQLite schema v3) in ")
    assert report[1:] == [
        "rows imported:",
        "  admin_users: 1",
        "  client_api_keys: 2",
        "  runtime_settings: 1",
        "  accounts: 2",
        "  account_usage: 1",
        "  account_cookies: 4",
        "  fingerprints: 1",
        "  fingerprint_update_history: 2",
        "  usage_records: 3",
        "  ops_error_logs: 3",
        "  request_time_buckets: 3",
        "normalised:",
        "  account_cookies: unparseable expires_at -> NULL (session): 1",
        "  accounts: refreshing -> expired, next_refresh_at cleared: 1",
        "  admin_users: argon2 hash in Django's format: 1",
        "  request_time_buckets: empty account_id -> __unknown__: 1",
        "  request_time_buckets: empty model -> __unknown__: 1",
        "  request_time_buckets: empty service_tier -> __unknown__: 3",
        "  request_time_buckets: merged after normalisation: 1",
        "  request_time_buckets: min_latency_ms 0 -> NULL: 1",
        "  runtime_settings: admin_api_key -> SHA-256 admin_api_key_hash: 1",
        "dropped (seed 004 §6.3 loss list):",
        "  admin_sessions: 1",
        "  session_affinities: 1",
        "  account_refresh_leases: 1",
        "  model_plan_snapshots: 1",
        "  account_model_usage: 2",
        "  usage_records noise (no account, no model or no 200-399 status): 4",
        "next: python manage.py rebuild_buckets, then start web, worker and beat",
    ]


def test_rebuild_buckets_after_the_import_matches_the_facts(source):
    run_import(source)
    old_buckets = list(RequestTimeBucket.objects.filter(bucket_start=OLD_SLOT).values())

    out = io.StringIO()
    call_command("rebuild_buckets", stdout=out)

    # Seed §6.4 check 4: inside the retention window bucket tokens = the facts' sums.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            select b.bucket_start, b.account_id, b.model, b.service_tier, b.success_count,
                   b.input_tokens, b.output_tokens, b.cached_tokens
            from request_time_buckets b where b.bucket_start >= %s and b.success_count > 0
            except
            select to_timestamp(floor(extract(epoch from created_at) / 900) * 900), account_id,
                   model, coalesce(nullif(service_tier, ''), '__unknown__'), count(*),
                   coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                   coalesce(sum(cached_tokens), 0)
            from usage_records group by 1, 2, 3, 4
            """,
            [SLOT],
        )
        assert cursor.fetchall() == []
    in_window = sorted(
        RequestTimeBucket.objects.filter(bucket_start__gte=SLOT).values_list(
            "bucket_start", "account_id", "model", "service_tier", "success_count",
            "error_count", "input_tokens", "output_tokens", "cached_tokens",
        )
    )  # fmt: skip
    assert in_window == [
        # v3's polluted bucket (555 + 5 input tokens, error tokens included) is recomputed.
        (SLOT, "__unknown__", "__unknown__", "__unknown__", 0, 1, 0, 0, 0),  # e_early
        (SLOT, "acc_active", "gpt-5.4", "__unknown__", 1, 2, 10, 4, 0),  # s_snake; e_rate, ops_v3
        (SLOT, "acc_active", "gpt-5.4", "priority", 1, 0, 100, 20, 40),  # s_camel
        (SLOT + timedelta(minutes=15), "acc_refreshing", "gpt-5.4-mini", "__unknown__",
         1, 0, 0, 7, 0),  # s_fallback
    ]  # fmt: skip
    # Buckets older than the facts' retention are left as imported.
    assert list(RequestTimeBucket.objects.filter(bucket_start=OLD_SLOT).values()) == old_buckets


def test_a_second_run_is_refused_and_changes_nothing(source):
    run_import(source)
    counts = table_counts()

    with pytest.raises(CommandError) as refused:
        run_import(source)

    assert str(refused.value) == (
        "import refused: the target database is not empty (admin_users, client_api_keys, "
        "runtime_settings, accounts, account_usage, usage_records, ops_error_logs, "
        "request_time_buckets, account_cookies, fingerprints, fingerprint_update_history "
        "already hold rows); the import runs once, into a freshly migrated database that web, "
        "worker and beat have never started on"
    )
    assert table_counts() == counts


def test_a_target_with_the_default_settings_row_is_refused(source):
    from django.utils import timezone

    from proxy.services.runtime_settings import runtime_settings_ensure

    runtime_settings_ensure(now=timezone.now())  # what a first start of web does

    with pytest.raises(CommandError, match=r"not empty \(runtime_settings already hold rows\)"):
        run_import(source)

    assert table_counts() == {table: int(table == "runtime_settings") for table in BUSINESS_TABLES}


def test_a_v2_source_is_refused(tmp_path):
    path = tmp_path / "v2.sqlite"
    database = build_source(path, version=2)
    insert(database, "admin_users", id="a", password_hash=ORIGINAL_HASH,
           created_at=z(NOW), updated_at=z(NOW))  # fmt: skip
    database.commit()
    database.close()

    with pytest.raises(CommandError) as refused:
        run_import(path)

    assert str(refused.value) == (
        f"import refused: {path} has SQLite schema version 2; only version 3 (the original's "
        "last SQLite release) can be imported. Start that release of the original once on this "
        "file to upgrade it, then retry."
    )
    assert set(table_counts().values()) == {0}


def test_a_file_that_is_not_the_originals_database_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    other.write_bytes(b"not a database at all, just some bytes" * 100)

    with pytest.raises(CommandError, match=r"is not a codex-proxy-rs SQLite database"):
        run_import(other)
    with pytest.raises(CommandError, match=r"does not exist or is not a file"):
        run_import(tmp_path / "missing.sqlite")


def test_a_row_breaking_a_v1_check_rolls_back_everything(source):
    import sqlite3

    database = sqlite3.connect(source)
    # The last table imported, so everything before it was already written when it fails.
    insert_unchecked(database, "usage_time_buckets", bucket_start=z(SLOT), account_id="acc_x",
                     model="m", service_tier="t", request_count=1, error_count=0,
                     input_tokens=-5, output_tokens=0, cached_tokens=0,
                     first_token_latency_sum=0, first_token_latency_count=0, latency_sum=0,
                     latency_count=0, max_latency_ms=0, min_latency_ms=0,
                     updated_at=z(SLOT))  # fmt: skip
    database.commit()
    database.close()

    with pytest.raises(CommandError) as rolled_back:
        run_import(source)

    message = str(rolled_back.value)
    assert message == (
        "import rolled back, nothing was written: PostgreSQL rejected a row of "
        "request_time_buckets (row 4 of its COPY): new row for relation "
        '"request_time_buckets" violates check constraint "request_time_buckets_input_tokens_check"'
    )
    assert set(table_counts().values()) == {0}


def test_a_rejected_row_holding_tokens_rolls_back_without_showing_them(source):
    """PostgreSQL's error detail quotes the whole failing row: the operator's terminal (and
    whatever collects it) must get the table and the constraint, never the row's tokens."""
    import sqlite3

    database = sqlite3.connect(source)
    insert_unchecked(database, "accounts", id="acc_odd", email="odd@example.com",
                     chatgpt_account_id="org-odd", chatgpt_user_id="user-odd", label=None,
                     plan_type="pro", access_token="at-SECRET-odd-0123456789",
                     refresh_token="rt-SECRET-odd-9876543210", access_token_expires_at=z(NOW),
                     next_refresh_at=None, status="frozen", quota_json=None,
                     quota_fetched_at=None, quota_limit_reached=0, quota_verify_required=0,
                     quota_cooldown_until=None, cloudflare_cooldown_until=None,
                     added_at=z(NOW), updated_at=z(NOW))  # fmt: skip
    database.commit()
    database.close()

    with pytest.raises(CommandError) as rolled_back:
        run_import(source)

    message = str(rolled_back.value)
    assert message.startswith(
        "import rolled back, nothing was written: PostgreSQL rejected a row of accounts"
    )
    assert 'violates check constraint "accounts_status_check"' in message
    assert "SECRET" not in message and "odd@example.com" not in message
    assert set(table_counts().values()) == {0}


def test_a_timestamp_without_an_offset_rolls_back_everything(source):
    import sqlite3

    database = sqlite3.connect(source)
    database.execute(
        "update usage_records set created_at = '2026-07-08 12:00:00' where id = 'e_rate'"
    )
    database.commit()
    database.close()

    with pytest.raises(CommandError) as rolled_back:
        run_import(source)

    assert str(rolled_back.value) == (
        "import rolled back, nothing was written: usage_records row 'e_rate': created_at is "
        "a text of 19 characters, not an RFC 3339 timestamp"
    )
    assert set(table_counts().values()) == {0}


@pytest.mark.subprocess
def test_an_unmigrated_target_is_refused_by_the_command(scratch_database, tmp_path, source):
    environment = project_environment(scratch_database, tmp_path)

    refused = run_project("manage.py", "import_sqlite", str(source), environment=environment)

    assert refused.returncode == 1
    assert "import refused: the database is not migrated to the current version" in refused.stderr
    assert "run `python manage.py migrate`" in refused.stderr

    migrate_project(environment)
    imported = run_project("manage.py", "import_sqlite", str(source), environment=environment)
    assert imported.returncode == 0, imported.stderr
    assert "  usage_records: 3" in imported.stdout.splitlines()
