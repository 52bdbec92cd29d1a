"""``request_time_buckets``: 15-minute add-to-count upserts and the rebuild from the facts.

Both paths put a fact in the same bucket with the same dimensions, so a rebuild inside the facts'
retention window reproduces what the live writes produced (seed 004 §2.10, §5.2):

* bucket_start = created_at floored to 900 s (``floor(epoch / 900) * 900`` in SQL);
* a missing or empty dimension is ``__unknown__``; error facts always use tier ``__unknown__``;
* success adds success_count, tokens (NULL counts as 0), latency and first-token sums/counts
  (NULL samples are not counted), greatest/least max/min latency; an error adds error_count only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection

from telemetry.models import UNKNOWN_DIMENSION

BUCKET_SECONDS = 900


def bucket_start_for(moment: datetime) -> datetime:
    """The start of the 15-minute slot containing ``moment`` (UTC, aligned to the epoch)."""
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % BUCKET_SECONDS, tz=UTC)


def dimension(value: str | None) -> str:
    return value if value else UNKNOWN_DIMENSION


@dataclass(frozen=True)
class BucketIncrement:
    bucket_start: datetime
    provider: str
    account_id: str
    model: str
    service_tier: str
    success_count: int = 0
    error_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    first_token_latency_sum: int = 0
    first_token_latency_count: int = 0
    latency_sum: int = 0
    latency_count: int = 0
    max_latency_ms: int = 0
    min_latency_ms: int | None = None


_UPSERT_COLUMNS = """
insert into request_time_buckets as bucket (
  bucket_start, provider, account_id, model, service_tier,
  success_count, error_count, input_tokens, output_tokens, cached_tokens,
  first_token_latency_sum, first_token_latency_count, latency_sum, latency_count,
  max_latency_ms, min_latency_ms, updated_at
) values
"""
_UPSERT_ROW = "(" + ", ".join(["%s"] * 17) + ")"
_UPSERT_CONFLICT = """
on conflict (bucket_start, provider, account_id, model, service_tier) do update set
  success_count = bucket.success_count + excluded.success_count,
  error_count = bucket.error_count + excluded.error_count,
  input_tokens = bucket.input_tokens + excluded.input_tokens,
  output_tokens = bucket.output_tokens + excluded.output_tokens,
  cached_tokens = bucket.cached_tokens + excluded.cached_tokens,
  first_token_latency_sum = bucket.first_token_latency_sum + excluded.first_token_latency_sum,
  first_token_latency_count =
    bucket.first_token_latency_count + excluded.first_token_latency_count,
  latency_sum = bucket.latency_sum + excluded.latency_sum,
  latency_count = bucket.latency_count + excluded.latency_count,
  max_latency_ms = greatest(bucket.max_latency_ms, excluded.max_latency_ms),
  min_latency_ms = least(bucket.min_latency_ms, excluded.min_latency_ms),
  updated_at = greatest(bucket.updated_at, excluded.updated_at)
"""
_UPSERT_SQL = _UPSERT_COLUMNS + _UPSERT_ROW + _UPSERT_CONFLICT


def bucket_add(*, increment: BucketIncrement, now: datetime) -> None:
    """Add ``increment`` to its bucket in one ``INSERT … ON CONFLICT DO UPDATE`` statement.

    ``least()`` ignores NULL in PostgreSQL, so a bucket without a latency sample keeps a NULL
    minimum until the first sample arrives. Call inside the fact's transaction.
    """
    buckets_add(increments=[increment], now=now)


def merge_increments(increments: list[BucketIncrement]) -> list[BucketIncrement]:
    """Add up increments of the same bucket (one upsert per bucket, and an INSERT … ON
    CONFLICT may not touch one row twice)."""
    merged: dict[tuple, BucketIncrement] = {}
    for increment in increments:
        key = (
            increment.bucket_start,
            increment.provider,
            increment.account_id,
            increment.model,
            increment.service_tier,
        )
        current = merged.get(key)
        if current is None:
            merged[key] = increment
            continue
        minimums = [
            value
            for value in (current.min_latency_ms, increment.min_latency_ms)
            if value is not None
        ]
        merged[key] = BucketIncrement(
            bucket_start=increment.bucket_start,
            provider=increment.provider,
            account_id=increment.account_id,
            model=increment.model,
            service_tier=increment.service_tier,
            success_count=current.success_count + increment.success_count,
            error_count=current.error_count + increment.error_count,
            input_tokens=current.input_tokens + increment.input_tokens,
            output_tokens=current.output_tokens + increment.output_tokens,
            cached_tokens=current.cached_tokens + increment.cached_tokens,
            first_token_latency_sum=current.first_token_latency_sum
            + increment.first_token_latency_sum,
            first_token_latency_count=current.first_token_latency_count
            + increment.first_token_latency_count,
            latency_sum=current.latency_sum + increment.latency_sum,
            latency_count=current.latency_count + increment.latency_count,
            max_latency_ms=max(current.max_latency_ms, increment.max_latency_ms),
            min_latency_ms=min(minimums) if minimums else None,
        )
    return list(merged.values())


def buckets_add(*, increments: list[BucketIncrement], now: datetime) -> None:
    """``bucket_add`` for several distinct buckets, in one multi-row statement."""
    if not increments:
        return
    parameters = []
    for increment in increments:
        parameters += [
            increment.bucket_start,
            increment.provider,
            increment.account_id,
            increment.model,
            increment.service_tier,
            increment.success_count,
            increment.error_count,
            increment.input_tokens,
            increment.output_tokens,
            increment.cached_tokens,
            increment.first_token_latency_sum,
            increment.first_token_latency_count,
            increment.latency_sum,
            increment.latency_count,
            increment.max_latency_ms,
            increment.min_latency_ms,
            now,
        ]
    with connection.cursor() as cursor:
        rows = ", ".join([_UPSERT_ROW] * len(increments))
        cursor.execute(_UPSERT_COLUMNS + rows + _UPSERT_CONFLICT, parameters)


# The same dimension and slot rules as the live path, expressed in SQL.
_REBUILD_SQL = """
insert into request_time_buckets (
  bucket_start, provider, account_id, model, service_tier,
  success_count, error_count, input_tokens, output_tokens, cached_tokens,
  first_token_latency_sum, first_token_latency_count, latency_sum, latency_count,
  max_latency_ms, min_latency_ms, updated_at
)
select
  bucket_start, provider, account_id, model, service_tier,
  sum(success), sum(error), sum(input_tokens), sum(output_tokens), sum(cached_tokens),
  coalesce(sum(first_token_ms), 0), count(first_token_ms),
  coalesce(sum(latency_ms), 0), count(latency_ms),
  coalesce(max(latency_ms), 0), min(latency_ms), %(now)s
from (
  select
    to_timestamp(floor(extract(epoch from created_at) / 900) * 900) as bucket_start,
    coalesce(nullif(provider, ''), '__unknown__') as provider,
    coalesce(nullif(account_id, ''), '__unknown__') as account_id,
    coalesce(nullif(model, ''), '__unknown__') as model,
    coalesce(nullif(service_tier, ''), '__unknown__') as service_tier,
    1 as success, 0 as error,
    coalesce(input_tokens, 0) as input_tokens,
    coalesce(output_tokens, 0) as output_tokens,
    coalesce(cached_tokens, 0) as cached_tokens,
    first_token_ms, latency_ms
  from usage_records where created_at >= %(cutoff)s
  union all
  select
    to_timestamp(floor(extract(epoch from created_at) / 900) * 900),
    coalesce(nullif(provider, ''), '__unknown__'),
    coalesce(nullif(account_id, ''), '__unknown__'),
    coalesce(nullif(model, ''), '__unknown__'),
    '__unknown__',
    0, 1, 0, 0, 0, null::bigint, null::bigint
  from ops_error_logs where created_at >= %(cutoff)s
) as facts
group by bucket_start, provider, account_id, model, service_tier
"""


@dataclass(frozen=True)
class RebuildResult:
    cutoff: datetime
    deleted: int
    rebuilt: int


def buckets_rebuild(*, cutoff: datetime, now: datetime) -> RebuildResult:
    """Replace every bucket at or after ``cutoff`` with buckets recomputed from the facts.

    ``cutoff`` must be aligned to 900 s so no bucket is half inside the window. Runs in one
    transaction holding an EXCLUSIVE lock on the buckets, so live upserts wait for the rebuild
    instead of being lost in it. Buckets before the cutoff (whose facts may have expired) and
    ``account_usage`` are never touched. Call inside ``transaction.atomic()``.
    """
    if cutoff != bucket_start_for(cutoff):
        raise ValueError("cutoff must be aligned to a 15-minute bucket")
    with connection.cursor() as cursor:
        cursor.execute("lock table request_time_buckets in exclusive mode")
        cursor.execute("delete from request_time_buckets where bucket_start >= %s", [cutoff])
        deleted = cursor.rowcount
        cursor.execute(_REBUILD_SQL, {"cutoff": cutoff, "now": now})
        rebuilt = cursor.rowcount
    return RebuildResult(cutoff=cutoff, deleted=deleted, rebuilt=rebuilt)
