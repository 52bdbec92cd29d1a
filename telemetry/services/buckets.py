"""``request_time_buckets``: 15-minute add-to-count upserts and the rebuild from the facts.

Both paths put a fact in the same bucket with the same dimensions, so a rebuild inside the facts'
retention window reproduces what the live writes produced (seed 004 §2.10, §5.2):

* bucket_start = created_at floored to 900 s (``floor(epoch / 900) * 900`` in SQL);
* a missing or empty dimension is ``__unknown__``; error facts always use tier ``__unknown__``;
* success adds success_count, tokens (NULL counts as 0), latency and first-token sums/counts
  (NULL samples are not counted), greatest/least max/min latency; an error adds error_count only.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

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
    """What one or more facts add to one bucket: its key, then its counters."""

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


def _least_ignoring_null(first: int | None, second: int | None) -> int | None:
    """PostgreSQL's ``least()``: NULL arguments are ignored; NULL only when all are NULL."""
    present = [value for value in (first, second) if value is not None]
    return min(present) if present else None


@dataclass(frozen=True)
class _CounterRule:
    """How two amounts of one counter combine: in the upsert's SQL and when merging a batch."""

    sql_template: str
    merge: Callable[[Any, Any], Any]


_ADD = _CounterRule("{column} = bucket.{column} + excluded.{column}", operator.add)
_COUNTER_RULES = {  # every other counter is added up
    "max_latency_ms": _CounterRule("{column} = greatest(bucket.{column}, excluded.{column})", max),
    "min_latency_ms": _CounterRule(
        "{column} = least(bucket.{column}, excluded.{column})", _least_ignoring_null
    ),
}
KEY_COLUMNS = ("bucket_start", "provider", "account_id", "model", "service_tier")
COUNTER_COLUMNS = tuple(
    field.name for field in fields(BucketIncrement) if field.name not in KEY_COLUMNS
)
COLUMNS = (*KEY_COLUMNS, *COUNTER_COLUMNS, "updated_at")


def _rule(column: str) -> _CounterRule:
    return _COUNTER_RULES.get(column, _ADD)


# SQL built from the constants above only, never from outside input (hence the S608 noqa).
_COLUMN_LIST = ", ".join(COLUMNS)
_UPSERT_HEAD = f"insert into request_time_buckets as bucket ({_COLUMN_LIST}) values "  # noqa: S608
_UPSERT_ROW = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
_UPSERT_CONFLICT = (
    f" on conflict ({', '.join(KEY_COLUMNS)}) do update set "
    + ", ".join(_rule(column).sql_template.format(column=column) for column in COUNTER_COLUMNS)
    + ", updated_at = greatest(bucket.updated_at, excluded.updated_at)"
)


def _key(increment: BucketIncrement) -> tuple:
    return tuple(getattr(increment, column) for column in KEY_COLUMNS)


def merge_increments(increments: list[BucketIncrement]) -> list[BucketIncrement]:
    """Add up increments of the same bucket (one upsert per bucket, and an INSERT … ON
    CONFLICT may not touch one row twice), combining each counter as the upsert does."""
    merged: dict[tuple, BucketIncrement] = {}
    for increment in increments:
        key = _key(increment)
        current = merged.get(key)
        if current is None:
            merged[key] = increment
            continue
        merged[key] = replace(
            current,
            **{
                column: _rule(column).merge(getattr(current, column), getattr(increment, column))
                for column in COUNTER_COLUMNS
            },
        )
    return list(merged.values())


def buckets_add(*, increments: list[BucketIncrement], now: datetime) -> None:
    """Add each increment to its bucket, all in one ``INSERT … ON CONFLICT DO UPDATE``.

    The increments must be of distinct buckets (``merge_increments`` first). ``least()``
    ignores NULL in PostgreSQL, so a bucket without a latency sample keeps a NULL minimum until
    the first sample arrives. Call inside the facts' transaction.
    """
    if not increments:
        return
    parameters = []
    for increment in increments:
        parameters += [getattr(increment, column) for column in (*KEY_COLUMNS, *COUNTER_COLUMNS)]
        parameters.append(now)
    with connection.cursor() as cursor:
        rows = ", ".join([_UPSERT_ROW] * len(increments))
        cursor.execute(_UPSERT_HEAD + rows + _UPSERT_CONFLICT, parameters)


# The same dimension and slot rules as the live path, expressed in SQL; the selected values are
# in the order of COLUMNS. Built from constants only (no outside input).
_REBUILD_SQL = f"""
insert into request_time_buckets ({_COLUMN_LIST})
select
  bucket_start, provider, account_id, model, service_tier,
  sum(success), sum(error), sum(input_tokens), sum(output_tokens), sum(cached_tokens),
  coalesce(sum(first_token_ms), 0), count(first_token_ms),
  coalesce(sum(latency_ms), 0), count(latency_ms),
  coalesce(max(latency_ms), 0), min(latency_ms), %(now)s
from (
  select
    to_timestamp(floor(extract(epoch from created_at) / {BUCKET_SECONDS}) * {BUCKET_SECONDS})
      as bucket_start,
    coalesce(nullif(provider, ''), '{UNKNOWN_DIMENSION}') as provider,
    coalesce(nullif(account_id, ''), '{UNKNOWN_DIMENSION}') as account_id,
    coalesce(nullif(model, ''), '{UNKNOWN_DIMENSION}') as model,
    coalesce(nullif(service_tier, ''), '{UNKNOWN_DIMENSION}') as service_tier,
    1 as success, 0 as error,
    coalesce(input_tokens, 0) as input_tokens,
    coalesce(output_tokens, 0) as output_tokens,
    coalesce(cached_tokens, 0) as cached_tokens,
    first_token_ms, latency_ms
  from usage_records where created_at >= %(cutoff)s
  union all
  select
    to_timestamp(floor(extract(epoch from created_at) / {BUCKET_SECONDS}) * {BUCKET_SECONDS}),
    coalesce(nullif(provider, ''), '{UNKNOWN_DIMENSION}'),
    coalesce(nullif(account_id, ''), '{UNKNOWN_DIMENSION}'),
    coalesce(nullif(model, ''), '{UNKNOWN_DIMENSION}'),
    '{UNKNOWN_DIMENSION}',
    0, 1, 0, 0, 0, null::bigint, null::bigint
  from ops_error_logs where created_at >= %(cutoff)s
) as facts
group by bucket_start, provider, account_id, model, service_tier
"""  # noqa: S608


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
