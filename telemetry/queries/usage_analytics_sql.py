"""The SQL of the usage analytics (``telemetry.queries.usage_analytics``): one grouped read of
``request_time_buckets``, one of each fact table, and one bounded sample of ``usage_records``
for percentiles.

Rows are grouped per period with ``width_bucket(time, <period starts>)`` (a binary search in the
array of period starts, right for any time zone) and per the dimensions the price needs (model,
service tier, long context), so the caller prices each group and adds them up. Every read
ranges over the leading column of an index: ``bucket_start`` (the buckets' primary key) or
``created_at`` (``idx_*_created_id``, or a dimension's ``(column, created_at desc)`` index when
that dimension is filtered). Each runs in its own transaction with a larger ``work_mem``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from telemetry.billing import LONG_CONTEXT_INPUT_TOKENS
from telemetry.models import UNKNOWN_DIMENSION

# A breakdown's column in each fact table (NULL is shown as the unknown dimension).
USAGE_COLUMNS = {
    "model": "model",
    "account": "account_id",
    "key": "client_api_key_id",
    "route": "route",
    "status": "status_code::text",
}
OPS_COLUMNS = USAGE_COLUMNS
PERCENTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class FactCondition:
    """``column = value`` on both fact tables (``value`` None: ``column is null``); a status
    filter of "ok" / "failed" keeps one of the two tables only."""

    column: str
    value: str | int | None


# Room for each grouping to hash in memory (PostgreSQL's default 4 MB spills a month of facts to
# disk and sorts them there), and no JIT compilation (it costs more than it saves at these sizes).
_SESSION = ("set local work_mem = '64MB'", "set local jit = off")


@contextmanager
def _cursor() -> Iterator[CursorWrapper]:
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in _SESSION:
            cursor.execute(statement)
        yield cursor


def _numbers(row: Sequence[Any]) -> list[Any]:
    """The row with its sums as whole numbers. The sums are taken over float8 (``_sum``) or
    come as numeric (a Decimal here): both hold whole numbers exactly."""
    return [int(value) if isinstance(value, Decimal | float) else value for value in row]


def _sum(expression: str) -> str:
    """``sum()`` in float8: PostgreSQL adds bigints up in numeric, which costs a year of buckets
    a third of its time; float8 is exact for whole sums below 2⁵³ (9·10¹⁵ tokens)."""
    return f"coalesce(sum(({expression})::float8), 0)"


_BUCKET_SUMS = (
    "success_count",
    "error_count",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "first_token_latency_sum",
    "first_token_latency_count",
    "latency_sum",
    "latency_count",
)


def bucket_rows(*, start: datetime, end: datetime, period_starts: Sequence[datetime]) -> list:
    """Per (period index, account, model, service tier): success, errors, input, output,
    cached, first-token sum, count, latency sum, count, max, min — buckets in [start, end)."""
    with _cursor() as cursor:
        cursor.execute(
            "select width_bucket(bucket_start, %s::timestamptz[]) - 1, account_id, model,"  # noqa: S608
            f" service_tier, {', '.join(_sum(column) for column in _BUCKET_SUMS)},"
            " max(max_latency_ms), min(min_latency_ms)"
            " from request_time_buckets where bucket_start >= %s and bucket_start < %s"
            " group by 1, 2, 3, 4",
            [list(period_starts), start, end],
        )
        return [_numbers(row) for row in cursor.fetchall()]


def _where(conditions: Sequence[FactCondition], *, start: datetime, end: datetime):
    clauses = ["created_at >= %s", "created_at < %s"]
    parameters: list[Any] = [start, end]
    for condition in conditions:
        if condition.value is None:
            clauses.append(f"{condition.column} is null")
        else:
            clauses.append(f"{condition.column} = %s")
            parameters.append(condition.value)
    return " and ".join(clauses), parameters


@dataclass(frozen=True)
class FactSelection:
    """Facts created in [start, end) matching ``conditions``, grouped per period (the starts)
    and per the column of the breakdown ``by``."""

    start: datetime
    end: datetime
    period_starts: Sequence[datetime]
    by: str
    conditions: Sequence[FactCondition]


def usage_fact_rows(selection: FactSelection) -> list:
    """Per (period index, group, model, service tier, long context): requests, input, output,
    cached (as stored), cached (at most the input, for the price), reasoning, first-token sum,
    count, latency sum, count, max, min — usage records of ``selection``."""
    by, period_starts = selection.by, selection.period_starts
    where, parameters = _where(selection.conditions, start=selection.start, end=selection.end)
    with _cursor() as cursor:
        cursor.execute(
            "select width_bucket(created_at, %s::timestamptz[]) - 1,"  # noqa: S608 - columns
            f" coalesce({USAGE_COLUMNS[by]}, %s), model, service_tier,"  # are constants
            f" coalesce(input_tokens, 0) > %s, count(*), {_sum('input_tokens')},"
            f" {_sum('output_tokens')}, {_sum('cached_tokens')},"
            f" {_sum('least(coalesce(cached_tokens, 0), coalesce(input_tokens, 0))')},"
            f" {_sum('reasoning_tokens')}, {_sum('first_token_ms')}, count(first_token_ms),"
            f" {_sum('latency_ms')}, count(latency_ms), coalesce(max(latency_ms), 0),"
            " min(latency_ms)"
            f" from usage_records where {where} group by 1, 2, 3, 4, 5",
            [list(period_starts), UNKNOWN_DIMENSION, LONG_CONTEXT_INPUT_TOKENS, *parameters],
        )
        return [_numbers(row) for row in cursor.fetchall()]


def ops_fact_rows(selection: FactSelection) -> list:
    """Per (period index, group): failures in ops errors of ``selection``."""
    by, period_starts = selection.by, selection.period_starts
    where, parameters = _where(selection.conditions, start=selection.start, end=selection.end)
    with _cursor() as cursor:
        cursor.execute(
            "select width_bucket(created_at, %s::timestamptz[]) - 1,"  # noqa: S608 - constants
            f" coalesce({OPS_COLUMNS[by]}, %s), count(*)"
            f" from ops_error_logs where {where} group by 1, 2",
            [list(period_starts), UNKNOWN_DIMENSION, *parameters],
        )
        return [_numbers(row) for row in cursor.fetchall()]


@dataclass(frozen=True)
class SampleRow:
    """Percentiles (p50, p95, p99) of one group of the sample (``group`` None: all of it)."""

    group: str | None
    requests: int
    latency: tuple[float, ...] | None
    first_token: tuple[float, ...] | None
    reasoning_tokens: int
    oldest: datetime | None


def usage_sample_rows(
    *,
    start: datetime,
    end: datetime,
    by: str,
    conditions: Sequence[FactCondition],
    limit: int,
) -> list[SampleRow]:
    """The newest ``limit`` usage records in [start, end) (a walk down the ``created_at``
    index): per group and for all of them, the latency and first-token percentiles, the
    reasoning tokens and the oldest record's time."""
    where, parameters = _where(conditions, start=start, end=end)
    with _cursor() as cursor:
        cursor.execute(
            "with sample as ("  # noqa: S608 - the columns are constants
            f" select coalesce({USAGE_COLUMNS[by]}, %s) as name, latency_ms, first_token_ms,"
            f" reasoning_tokens, created_at from usage_records where {where}"
            " order by created_at desc limit %s)"
            " select grouping(name), name, count(*),"
            " percentile_cont(%s::float8[]) within group (order by latency_ms),"
            " percentile_cont(%s::float8[]) within group (order by first_token_ms),"
            " coalesce(sum(reasoning_tokens), 0), min(created_at)"
            " from sample group by grouping sets ((name), ())",
            [UNKNOWN_DIMENSION, *parameters, limit, list(PERCENTILES), list(PERCENTILES)],
        )
        rows = []
        for total, name, requests, latency, first_token, reasoning, oldest in cursor.fetchall():
            rows.append(
                SampleRow(
                    group=None if total else name,
                    requests=requests,
                    latency=tuple(latency) if latency is not None else None,
                    first_token=tuple(first_token) if first_token is not None else None,
                    reasoning_tokens=int(reasoning),
                    oldest=oldest,
                )
            )
        return rows
