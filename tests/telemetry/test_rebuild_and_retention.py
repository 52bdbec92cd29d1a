"""rebuild_buckets reproduces the live buckets; retention trims delete in batches."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from proxy.models import RuntimeSettings
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from telemetry.services.buckets import bucket_start_for, buckets_rebuild
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from telemetry.services.retention import telemetry_trim


def _buckets() -> list[dict]:
    rows = RequestTimeBucket.objects.order_by(
        "bucket_start", "provider", "account_id", "model", "service_tier"
    ).values()
    return [{key: value for key, value in row.items() if key != "updated_at"} for row in rows]


def _write_varied_facts(start: datetime) -> None:
    """Successes and failures across slots, accounts, models, tiers and missing values."""
    for minute in range(0, 75, 4):
        moment = start + timedelta(minutes=minute, seconds=minute)
        usage_record_create(
            created_at=moment,
            account_id=f"acct_{minute % 3}",
            model="gpt-5.4" if minute % 2 else "gpt-5.5",
            message="v1 responses completed",
            service_tier=None if minute % 5 == 0 else ("priority" if minute % 3 else "flex"),
            latency_ms=None if minute % 7 == 0 else minute * 10,
            first_token_ms=None if minute % 6 == 0 else minute,
            input_tokens=None if minute % 8 == 0 else minute * 3,
            output_tokens=minute,
            cached_tokens=minute // 2,
        )
        if minute % 3 == 0:
            ops_error_log_create(
                created_at=moment,
                message="v1 responses dispatch failed",
                account_id=None if minute % 2 else f"acct_{minute % 3}",
                model="gpt-5.4",
                provider="openai" if minute % 2 else None,
                status_code=503,
                latency_ms=5,
            )


@pytest.mark.django_db
def test_rebuild_reproduces_the_live_written_buckets_exactly():
    now = timezone.now()
    _write_varied_facts(now - timedelta(hours=3))
    live = _buckets()
    assert len(live) > 10

    result = buckets_rebuild(cutoff=bucket_start_for(now - timedelta(days=30)), now=now)

    assert _buckets() == live
    assert result.deleted == len(live) and result.rebuilt == len(live)


@pytest.mark.django_db
def test_rebuild_command_prints_counts_and_leaves_older_buckets_alone():
    now = timezone.now()
    runtime_settings_ensure(now=now)
    RuntimeSettings.objects.update(usage_retention_days=10, ops_error_retention_days=5)
    _write_varied_facts(now - timedelta(hours=2))
    # A bucket older than the window (its facts expired long ago) is first-class data now.
    old_start = bucket_start_for(now - timedelta(days=6))
    RequestTimeBucket.objects.create(
        bucket_start=old_start,
        provider="openai",
        account_id="acct_old",
        model="gpt-4",
        service_tier="__unknown__",
        success_count=7,
        updated_at=now,
    )
    # A drifted bucket inside the window is corrected by the rebuild.
    RequestTimeBucket.objects.filter(account_id="acct_1").update(success_count=999)
    oldest_fact_kept = now - timedelta(days=5)
    expected_cutoff = bucket_start_for(oldest_fact_kept)
    if expected_cutoff < oldest_fact_kept:  # rounded up: the straddling bucket is left alone
        expected_cutoff += timedelta(minutes=15)
    straddling = RequestTimeBucket.objects.create(
        bucket_start=bucket_start_for(oldest_fact_kept),
        provider="openai",
        account_id="acct_edge",
        model="gpt-4",
        service_tier="__unknown__",
        success_count=3,
        updated_at=now,
    )
    out = io.StringIO()

    call_command("rebuild_buckets", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == f"cutoff: {expected_cutoff.isoformat()}"
    assert lines[1].startswith("deleted: ") and lines[2].startswith("rebuilt: ")
    assert RequestTimeBucket.objects.get(account_id="acct_old").success_count == 7
    assert (
        RequestTimeBucket.objects.get(account_id="acct_edge").success_count
        == straddling.success_count
    )
    assert not RequestTimeBucket.objects.filter(success_count=999).exists()


def test_rebuild_refuses_an_unaligned_cutoff():
    with pytest.raises(ValueError, match="aligned"):
        buckets_rebuild(cutoff=datetime(2026, 1, 1, 0, 1, tzinfo=UTC), now=timezone.now())


@pytest.mark.django_db
def test_trim_deletes_by_each_tables_window_in_batches():
    now = timezone.now()
    for days_ago in (1, 20, 40, 100):
        created = now - timedelta(days=days_ago)
        for _ in range(3):
            usage_record_create(created_at=created, account_id="a", model="m", message="ok")
            ops_error_log_create(created_at=created, message="failed")

    result = telemetry_trim(
        now=now,
        usage_retention_days=30,
        ops_error_retention_days=10,
        bucket_retention_days=90,
        batch_size=2,
    )

    assert (result.usage_records, result.ops_error_logs, result.request_time_buckets) == (6, 9, 2)
    assert UsageRecord.objects.count() == 6
    assert OpsErrorLog.objects.count() == 3
    oldest_bucket = RequestTimeBucket.objects.order_by("bucket_start").first().bucket_start
    assert oldest_bucket >= now - timedelta(days=90)
