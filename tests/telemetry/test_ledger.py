"""The two write transactions of seed 004 §5.2 and the bucket arithmetic."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection

from telemetry.models import OpsErrorLog, RequestTimeBucket, UsageRecord
from telemetry.services.buckets import bucket_start_for
from telemetry.services.facts import ErrorFact, UsageFact
from telemetry.services.ledger import ops_error_log_create, usage_record_create

T0 = datetime(2026, 11, 1, 10, 7, 30, tzinfo=UTC)  # inside the 10:00–10:15 bucket


def _success(**overrides):
    values = {
        "created_at": T0,
        "account_id": "acct_a",
        "model": "gpt-5.4",
        "message": "v1 responses stream completed",
        "route": "/v1/responses",
        "service_tier": "priority",
        "latency_ms": 120,
        "first_token_ms": 40,
        "input_tokens": 100,
        "output_tokens": 20,
        "cached_tokens": 60,
        "reasoning_tokens": 5,
    }
    values.update(overrides)
    return usage_record_create(**values)


def _bucket_rows() -> list[dict]:
    return list(
        RequestTimeBucket.objects.order_by(
            "bucket_start", "provider", "account_id", "model", "service_tier"
        ).values()
    )


def test_bucket_start_is_the_fifteen_minute_slot():
    assert bucket_start_for(T0) == datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
    assert bucket_start_for(datetime(2026, 11, 1, 10, 15, tzinfo=UTC)) == datetime(
        2026, 11, 1, 10, 15, tzinfo=UTC
    )
    assert bucket_start_for(datetime(2026, 11, 1, 10, 14, 59, 999999, tzinfo=UTC)) == datetime(
        2026, 11, 1, 10, 0, tzinfo=UTC
    )


@pytest.mark.django_db
def test_success_writes_the_fact_and_adds_to_its_bucket():
    record = _success()
    _success(
        created_at=T0 + timedelta(minutes=5), latency_ms=80, first_token_ms=None, input_tokens=None
    )

    assert record.id.startswith("usage_") and record.kind == "v1.response"
    assert UsageRecord.objects.count() == 2
    [bucket] = _bucket_rows()
    assert bucket | {"updated_at": None} == {
        "bucket_start": datetime(2026, 11, 1, 10, 0, tzinfo=UTC),
        "provider": "openai",
        "account_id": "acct_a",
        "model": "gpt-5.4",
        "service_tier": "priority",
        "success_count": 2,
        "error_count": 0,
        "input_tokens": 100,
        "output_tokens": 40,
        "cached_tokens": 120,
        "first_token_latency_sum": 40,
        "first_token_latency_count": 1,
        "latency_sum": 200,
        "latency_count": 2,
        "max_latency_ms": 120,
        "min_latency_ms": 80,
        "updated_at": None,
    }


@pytest.mark.django_db
def test_failure_adds_only_error_count_with_unknown_dimensions():
    error = ops_error_log_create(
        created_at=T0,
        message="v1 responses dispatch failed",
        route="/v1/responses",
        status_code=503,
        failure_class="no_available_accounts",
        latency_ms=900,
    )

    assert error.id.startswith("ops_error_") and error.kind == "v1.response"
    [bucket] = _bucket_rows()
    assert (bucket["provider"], bucket["account_id"], bucket["model"], bucket["service_tier"]) == (
        "__unknown__",
        "__unknown__",
        "__unknown__",
        "__unknown__",
    )
    assert bucket["error_count"] == 1 and bucket["success_count"] == 0
    assert (bucket["latency_sum"], bucket["latency_count"], bucket["max_latency_ms"]) == (0, 0, 0)
    assert bucket["min_latency_ms"] is None
    assert (bucket["input_tokens"], bucket["output_tokens"], bucket["cached_tokens"]) == (0, 0, 0)


@pytest.mark.django_db
def test_zero_millisecond_latency_is_a_legal_sample():
    _success(latency_ms=0, first_token_ms=0)

    [bucket] = _bucket_rows()
    assert (bucket["latency_count"], bucket["min_latency_ms"], bucket["max_latency_ms"]) == (
        1,
        0,
        0,
    )
    assert bucket["first_token_latency_count"] == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "constraint"),
    [
        ({"status_code": 500}, "usage_records_status_code_check"),
        ({"status_code": 199}, "usage_records_status_code_check"),
        ({"input_tokens": -1}, "usage_records_input_tokens_check"),
        ({"latency_ms": -5}, "usage_records_latency_ms_check"),
        ({"attempt_index": -1}, "usage_records_attempt_index_check"),
    ],
)
def test_usage_checks_reject_bad_rows_and_nothing_is_written(overrides, constraint):
    with pytest.raises(IntegrityError, match=constraint):
        _success(**overrides)

    assert UsageRecord.objects.count() == 0
    assert RequestTimeBucket.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "constraint"),
    [
        ({"status_code": 600}, "ops_error_logs_status_code_check"),
        ({"client_status_code": 99}, "ops_error_logs_client_status_code_check"),
        ({"upstream_status_code": 1000}, "ops_error_logs_upstream_status_code_check"),
        ({"latency_ms": -1}, "ops_error_logs_latency_ms_check"),
    ],
)
def test_ops_checks_reject_bad_rows_and_nothing_is_written(overrides, constraint):
    with pytest.raises(IntegrityError, match=constraint):
        ops_error_log_create(created_at=T0, message="failed", **overrides)

    assert OpsErrorLog.objects.count() == 0
    assert RequestTimeBucket.objects.count() == 0


@pytest.fixture
def failing_bucket_writes(db):
    """A real database failure on every bucket write, after the fact insert succeeded."""
    with connection.cursor() as cursor:
        cursor.execute(
            "create function reject_bucket() returns trigger language plpgsql as "
            "$$ begin raise exception 'bucket write refused'; end $$"
        )
        cursor.execute(
            "create trigger reject_bucket before insert or update on request_time_buckets "
            "for each row execute function reject_bucket()"
        )
    yield
    # The test's transaction is rolled back, taking the trigger with it.


def test_a_failure_inside_the_success_transaction_leaves_neither_fact_nor_bucket(
    failing_bucket_writes,
):
    with pytest.raises(Exception, match="bucket write refused"):
        _success()

    assert UsageRecord.objects.count() == 0
    assert RequestTimeBucket.objects.count() == 0


def test_a_failure_inside_the_error_transaction_leaves_no_fact(failing_bucket_writes):
    with pytest.raises(Exception, match="bucket write refused"):
        ops_error_log_create(created_at=T0, message="failed")

    assert OpsErrorLog.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_concurrent_upserts_into_one_bucket_add_up_exactly():
    threads_count, per_thread = 6, 25
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []

    def write(thread_number: int) -> None:
        try:
            barrier.wait()
            for index in range(per_thread):
                _success(
                    created_at=T0 + timedelta(seconds=index),
                    latency_ms=thread_number * 100 + index,
                    input_tokens=3,
                )
                ops_error_log_create(
                    created_at=T0, message="x", account_id="acct_a", model="gpt-5.4"
                )
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(number,)) for number in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    success_bucket = RequestTimeBucket.objects.get(service_tier="priority")
    total = threads_count * per_thread
    assert success_bucket.success_count == total
    assert success_bucket.input_tokens == 3 * total
    assert success_bucket.latency_count == total
    assert success_bucket.min_latency_ms == 0
    assert success_bucket.max_latency_ms == (threads_count - 1) * 100 + per_thread - 1
    error_bucket = RequestTimeBucket.objects.get(service_tier="__unknown__")
    assert error_bucket.error_count == total


def _usage_fact(**overrides):
    fact = {
        "created_at": T0,
        "account_id": "acct_a",
        "model": "gpt-5.4",
        "message": "v1 responses stream completed",
        "route": "/v1/responses",
        "latency_ms": 100,
        "first_token_ms": 30,
        "input_tokens": 10,
        "output_tokens": 2,
        "metadata": {"stream": True},
    }
    fact.update(overrides)
    return UsageFact(**fact)


@pytest.mark.django_db
def test_a_batch_writes_the_same_facts_and_buckets_as_one_by_one():
    from telemetry.services.buckets import buckets_rebuild
    from telemetry.services.ledger import ledger_write_batch

    usage = [_usage_fact(latency_ms=latency) for latency in (0, 50, 300)]
    usage.append(
        _usage_fact(model="gpt-5.5", service_tier="priority", created_at=T0 + timedelta(minutes=20))
    )
    errors = [
        ErrorFact(
            created_at=T0,
            message="failed",
            status_code=503,
            account_id="acct_a",
            model="gpt-5.4",
        )
    ]

    ledger_write_batch(usage_facts=usage, error_facts=errors)

    assert UsageRecord.objects.count() == 4 and OpsErrorLog.objects.count() == 1
    assert UsageRecord.objects.filter(metadata_json={"stream": True}).count() == 4
    written = _bucket_rows()
    first = next(
        row
        for row in written
        if row["model"] == "gpt-5.4"
        and row["service_tier"] == "__unknown__"
        and row["success_count"]
    )
    assert (
        first["success_count"],
        first["latency_count"],
        first["min_latency_ms"],
        first["max_latency_ms"],
    ) == (3, 3, 0, 300)
    assert (first["input_tokens"], first["first_token_latency_sum"]) == (30, 90)
    buckets_rebuild(cutoff=bucket_start_for(T0 - timedelta(days=1)), now=T0)
    assert [{k: v for k, v in row.items() if k != "updated_at"} for row in _bucket_rows()] == [
        {k: v for k, v in row.items() if k != "updated_at"} for row in written
    ]


@pytest.mark.django_db
def test_a_batch_with_a_bad_fact_writes_nothing():
    from telemetry.services.ledger import ledger_write_batch

    with pytest.raises(IntegrityError):
        ledger_write_batch(
            usage_facts=[_usage_fact(), _usage_fact(status_code=500)], error_facts=[]
        )

    assert UsageRecord.objects.count() == 0
    assert RequestTimeBucket.objects.count() == 0


def test_a_misspelt_fact_field_is_a_type_error_not_a_null_column():
    with pytest.raises(TypeError, match="input_token"):
        UsageFact(created_at=T0, model="gpt-5.4", message="ok", input_token=10)
    with pytest.raises(TypeError):
        ErrorFact(T0, "failed")  # keyword-only: positional values could land in the wrong column


@pytest.mark.django_db
def test_the_batch_writer_refuses_plain_dicts_and_writes_nothing():
    from telemetry.services.ledger import ledger_write_batch

    misspelt = {"created_at": T0, "model": "gpt-5.4", "message": "ok", "input_token": 10}
    with pytest.raises(TypeError, match="expected UsageFact, got dict"):
        ledger_write_batch(usage_facts=[_usage_fact(), misspelt], error_facts=[])

    assert UsageRecord.objects.count() == 0
    assert RequestTimeBucket.objects.count() == 0


def test_merging_increments_of_one_bucket_combines_each_counter_like_the_upsert():
    from telemetry.services.buckets import BucketIncrement, merge_increments

    key = {
        "bucket_start": bucket_start_for(T0),
        "provider": "openai",
        "account_id": "acct_a",
        "model": "gpt-5.4",
        "service_tier": "priority",
    }
    unmeasured = BucketIncrement(**key, success_count=1, input_tokens=5)
    fast = BucketIncrement(
        **key,
        success_count=1,
        latency_sum=40,
        latency_count=1,
        max_latency_ms=40,
        min_latency_ms=40,
    )
    slow = BucketIncrement(
        **key,
        success_count=1,
        latency_sum=90,
        latency_count=1,
        max_latency_ms=90,
        min_latency_ms=90,
    )
    other = BucketIncrement(**{**key, "model": "gpt-5.5"}, error_count=1)

    merged = merge_increments([unmeasured, slow, other, fast])

    assert merged == [
        BucketIncrement(
            **key,
            success_count=3,
            input_tokens=5,
            latency_sum=130,
            latency_count=2,
            max_latency_ms=90,
            min_latency_ms=40,  # least() ignores the unmeasured NULL
        ),
        other,
    ]
    assert merge_increments([unmeasured, unmeasured])[0].min_latency_ms is None
