"""Proxy tables: CHECKs, cascades, account_usage upserts, retention jobs through a real worker."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from proxy.models import (
    Account,
    AccountCookie,
    AccountUsage,
    AdminLoginEvent,
    FingerprintUpdateHistory,
    RuntimeSettings,
)
from proxy.services.account_usage import AccountUsageIncrement, account_usage_add
from proxy.services.runtime_settings import (
    RUNTIME_SETTINGS_DEFAULTS,
    runtime_settings_ensure,
    runtime_settings_update,
)
from proxy.tasks import delete_expired_cookies_task, trim_retention_task
from telemetry.models import UsageRecord
from telemetry.services.ledger import usage_record_create
from tests.proxy.factories import make_account, make_cookie, make_fingerprint


@pytest.mark.django_db
def test_runtime_settings_singleton_is_created_once_with_the_defaults():
    now = timezone.now()
    first = runtime_settings_ensure(now=now)
    RuntimeSettings.objects.update(rotation_strategy="sticky")
    second = runtime_settings_ensure(now=now + timedelta(hours=1))

    assert first.id == 1
    assert {
        name: getattr(first, name) for name in RUNTIME_SETTINGS_DEFAULTS
    } == RUNTIME_SETTINGS_DEFAULTS
    # The values themselves, as the spec (§3.4, §4.1, §12) and seed 004 §4.4 give them.
    assert {name: getattr(first, name) for name in RUNTIME_SETTINGS_DEFAULTS} == {
        "model_aliases_json": {},
        "refresh_margin_seconds": 3600,
        "refresh_concurrency": 2,
        "max_concurrent_per_account": 3,
        "request_interval_ms": 50,
        "rotation_strategy": "smart",
        "admin_api_key_hash": None,
        "usage_retention_days": 30,
        "ops_error_retention_days": 30,
        "bucket_retention_days": 90,
    }
    assert second.rotation_strategy == "sticky"  # never overwritten
    assert RuntimeSettings.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("column", "value", "constraint"),
    [
        ("rotation_strategy", "random", "runtime_settings_rotation_strategy_check"),
        ("max_concurrent_per_account", 0, "runtime_settings_max_concurrent_per_account_check"),
        ("request_interval_ms", -1, "runtime_settings_request_interval_ms_check"),
        ("usage_retention_days", 0, "runtime_settings_usage_retention_days_check"),
    ],
)
def test_runtime_settings_checks_reject_bad_values(column, value, constraint):
    runtime_settings_ensure(now=timezone.now())

    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        runtime_settings_update(changes={column: value}, now=timezone.now())

    assert getattr(RuntimeSettings.objects.get(), column) == RUNTIME_SETTINGS_DEFAULTS[column]


@pytest.mark.django_db
def test_runtime_settings_has_one_row_only():
    runtime_settings_ensure(now=timezone.now())
    with pytest.raises(IntegrityError, match="runtime_settings_id_check"), transaction.atomic():
        RuntimeSettings.objects.create(id=2, **RUNTIME_SETTINGS_DEFAULTS, updated_at=timezone.now())


@pytest.mark.django_db
def test_runtime_settings_update_bumps_the_version_key(
    redis_client, settings, django_capture_on_commit_callbacks
):
    runtime_settings_ensure(now=timezone.now())
    key = f"{settings.REDIS_KEY_PREFIX}settings:version"
    before = int(redis_client.get(key) or 0)

    with django_capture_on_commit_callbacks(execute=True):
        runtime_settings_update(changes={"rotation_strategy": "round_robin"}, now=timezone.now())
        assert int(redis_client.get(key) or 0) == before  # not before the commit

    assert int(redis_client.get(key)) == before + 1
    assert RuntimeSettings.objects.get().rotation_strategy == "round_robin"


@pytest.mark.django_db
def test_account_checks_and_identity_uniqueness():
    with pytest.raises(IntegrityError, match="accounts_status_check"), transaction.atomic():
        make_account(status="refreshing")
    make_account(chatgpt_account_id="org-1", chatgpt_user_id=None)
    make_account(chatgpt_account_id="org-1", chatgpt_user_id="user-2")
    with pytest.raises(IntegrityError, match="ux_accounts_chatgpt_identity"), transaction.atomic():
        make_account(chatgpt_account_id="org-1", chatgpt_user_id=None)
    # Accounts of unknown identity never collide.
    make_account(chatgpt_account_id=None)
    make_account(chatgpt_account_id=None)
    assert Account.objects.count() == 4


@pytest.mark.django_db
def test_deleting_an_account_cascades_in_the_database():
    account = make_account()
    account_usage_add(
        account_id=account.id,
        increment=AccountUsageIncrement(counted_request=True),
        now=timezone.now(),
    )
    make_cookie(account=account)
    usage_record_create(created_at=timezone.now(), account_id=account.id, model="m", message="ok")

    with connection.cursor() as cursor:  # plain SQL: the database itself must cascade
        cursor.execute("delete from accounts where id = %s", [account.id])

    assert AccountUsage.objects.count() == 0
    assert AccountCookie.objects.count() == 0
    assert UsageRecord.objects.count() == 1  # facts outlive their account (no FK by design)


@pytest.mark.django_db
def test_account_usage_upsert_adds_lifetime_and_window_counters():
    account = make_account()
    now = timezone.now()
    account_usage_add(
        account_id=account.id,
        increment=AccountUsageIncrement(
            counted_request=True,
            input_tokens=10,
            output_tokens=4,
            cached_tokens=3,
            reasoning_tokens=2,
        ),
        now=now,
    )
    account_usage_add(
        account_id=account.id,
        increment=AccountUsageIncrement(
            empty_response=True, image_request=True, image_request_failed=True
        ),
        now=now + timedelta(seconds=5),
    )

    usage = AccountUsage.objects.get(account=account)
    assert (usage.request_count, usage.window_request_count) == (1, 1)
    assert (usage.input_tokens, usage.window_input_tokens, usage.total_tokens) == (10, 10, 14)
    assert (usage.reasoning_tokens, usage.cached_tokens, usage.window_cached_tokens) == (2, 3, 3)
    assert usage.empty_response_count == 1
    assert (usage.image_request_count, usage.image_request_failed_count) == (1, 1)
    assert usage.window_started_at == now and usage.last_used_at == now  # uncounted: no stamp


def test_account_usage_increment_refuses_negative_counts():
    with pytest.raises(ValueError, match="input_tokens must not be negative"):
        AccountUsageIncrement(input_tokens=-1)


@pytest.mark.django_db(transaction=True)
def test_concurrent_account_usage_upserts_lose_nothing():
    account = make_account()
    barrier = threading.Barrier(5)

    def write() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                account_usage_add(
                    account_id=account.id,
                    increment=AccountUsageIncrement(counted_request=True, output_tokens=2),
                    now=timezone.now(),
                )
        finally:
            connection.close()

    threads = [threading.Thread(target=write) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    usage = AccountUsage.objects.get(account=account)
    assert (usage.request_count, usage.output_tokens) == (100, 200)


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_hourly_trim_runs_in_a_real_worker(celery_worker):
    now = timezone.now()
    runtime_settings_ensure(now=now)
    RuntimeSettings.objects.update(usage_retention_days=7)
    for days_ago in (1, 8, 9):
        usage_record_create(
            created_at=now - timedelta(days=days_ago), account_id="a", model="m", message="ok"
        )
    fingerprint = make_fingerprint()
    for index in range(105):
        FingerprintUpdateHistory.objects.create(
            id=f"fph_{index:03d}",
            current_fingerprint=fingerprint,
            app_version="1",
            build_number=str(index),
            source="auto_update",
            created_at=now - timedelta(minutes=index),
        )
    for days_ago in (1, 89, 91, 120):
        AdminLoginEvent.objects.create(
            created_at=now - timedelta(days=days_ago), surface="admin", outcome="failure"
        )

    result = celery_worker.run(trim_retention_task)

    assert result == {
        "usage_records": 2,
        "ops_error_logs": 0,
        "request_time_buckets": 0,
        "fingerprint_update_history": 5,
        "admin_login_events": 2,
    }
    assert AdminLoginEvent.objects.count() == 2  # the log-in audit keeps 90 days
    assert UsageRecord.objects.count() == 1
    kept = set(FingerprintUpdateHistory.objects.values_list("id", flat=True))
    assert kept == {f"fph_{index:03d}" for index in range(100)}  # the newest 100
    assert celery_worker.run(trim_retention_task)["usage_records"] == 0  # idempotent


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_expired_cookies_are_deleted_by_the_worker(celery_worker):
    account = make_account()
    now = timezone.now()
    expired = make_cookie(account=account, name="a", expires_at=now - timedelta(seconds=1))
    fresh = make_cookie(account=account, name="b", expires_at=now + timedelta(hours=1))
    session = make_cookie(account=account, name="c", expires_at=None)

    deleted = celery_worker.run(delete_expired_cookies_task)

    assert deleted == 1
    remaining = set(AccountCookie.objects.values_list("id", flat=True))
    assert remaining == {fresh.id, session.id}
    assert expired.id not in remaining


@pytest.mark.django_db
def test_cookie_identity_is_unique_per_account_domain_name_path():
    account = make_account()
    make_cookie(account=account, path="/")
    make_cookie(account=account, path="/backend-api")
    with (
        pytest.raises(IntegrityError, match="account_cookies_account_id_domain_name_path_key"),
        transaction.atomic(),
    ):
        make_cookie(account=account, path="/", id=f"cookie_{uuid.uuid4().hex}")


@pytest.mark.django_db(transaction=True)
def test_the_ledger_writer_keeps_good_rows_when_a_batch_is_rejected():
    from proxy.ledger.writer import LedgerEntry, _Unit, _write_unit_in_thread
    from telemetry.services.facts import UsageFact

    account = make_account()
    now = timezone.now()
    good = UsageFact(created_at=now, account_id=account.id, model="m", message="ok")
    bad = dataclasses.replace(good, status_code=500)
    entries = [
        LedgerEntry(
            usage=good, account_usage=[(account.id, AccountUsageIncrement(counted_request=True))]
        ),
        LedgerEntry(
            usage=bad, account_usage=[("acct_deleted", AccountUsageIncrement(counted_request=True))]
        ),
    ]

    assert _write_unit_in_thread(_Unit(entries)) is None  # nothing left to retry

    assert UsageRecord.objects.count() == 1
    assert AccountUsage.objects.get(account=account).request_count == 1
