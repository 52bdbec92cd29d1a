"""Sums over ``request_time_buckets`` (seed 004 §4.9, §5.3): the dashboard's traffic cards,
trend and health timeline, and each account's usage inside its quota windows.

Traffic counts are ``success_count + error_count`` (``request_count`` is not stored); tokens and
latencies are successes only. Every query ranges over ``bucket_start`` (the primary key's first
column).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection

from telemetry.services.buckets import BUCKET_SECONDS, bucket_start_for


class SumReadings:
    """What a set of request sums reads as (``BucketSums``, the usage analytics' ``UsageSums``):
    the dataclass that mixes this in has the fields."""

    success: int
    errors: int
    input_tokens: int
    output_tokens: int
    first_token_sum: int
    first_token_count: int
    latency_sum: int
    latency_count: int

    @property
    def requests(self) -> int:
        return self.success + self.errors

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def average_first_token_ms(self) -> float | None:
        return self.first_token_sum / self.first_token_count if self.first_token_count else None

    @property
    def average_latency_ms(self) -> float | None:
        return self.latency_sum / self.latency_count if self.latency_count else None


@dataclass
class BucketSums(SumReadings):
    success: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    first_token_sum: int = 0
    first_token_count: int = 0
    latency_sum: int = 0
    latency_count: int = 0
    max_latency_ms: int = 0
    min_latency_ms: int | None = None
    last_updated: datetime | None = None


_SUMS = """
  coalesce(sum(success_count), 0), coalesce(sum(error_count), 0),
  coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
  coalesce(sum(cached_tokens), 0),
  coalesce(sum(first_token_latency_sum), 0), coalesce(sum(first_token_latency_count), 0),
  coalesce(sum(latency_sum), 0), coalesce(sum(latency_count), 0),
  coalesce(max(max_latency_ms), 0), min(min_latency_ms), max(updated_at)
"""


def _sums(row: tuple[Any, ...]) -> BucketSums:
    # sum(bigint) is numeric in PostgreSQL (a Decimal here); the counts are whole numbers.
    values: list[Any] = [int(value) if isinstance(value, Decimal) else value for value in row]
    return BucketSums(*values)


def bucket_totals(*, start: datetime, end: datetime) -> BucketSums:
    """Everything in buckets starting in [start, end)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"select {_SUMS} from request_time_buckets"  # noqa: S608 - constant SQL
            " where bucket_start >= %s and bucket_start < %s",
            [start, end],
        )
        return _sums(cursor.fetchone())


def bucket_slots(*, start: datetime, end: datetime) -> dict[datetime, BucketSums]:
    """Each 15-minute slot in [start, end) that has a bucket, summed over its dimensions."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"select bucket_start, {_SUMS} from request_time_buckets"  # noqa: S608
            " where bucket_start >= %s and bucket_start < %s group by bucket_start",
            [start, end],
        )
        return {row[0]: _sums(row[1:]) for row in cursor.fetchall()}


def slot_starts(*, start: datetime, count: int) -> list[datetime]:
    first = bucket_start_for(start)
    return [
        datetime.fromtimestamp(first.timestamp() + index * BUCKET_SECONDS, tz=first.tzinfo)
        for index in range(count)
    ]


@dataclass(frozen=True)
class AccountWindow:
    """One quota window of one account: its usage is summed from ``since``."""

    account_id: str
    key: str
    since: datetime


def bucket_usage_in_windows(
    windows: list[AccountWindow], *, by_model: bool = False
) -> dict[tuple, BucketSums]:
    """Per (account, window key[, model, service tier]): the buckets since each window's start
    (floored to its 15-minute slot), in one query."""
    if not windows:
        return {}
    extra = ", b.model, b.service_tier" if by_model else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"select w.account_id, w.key{extra}, {_SUMS.replace('sum(', 'sum(b.')}"  # noqa: S608
            " from unnest(%s::text[], %s::text[], %s::timestamptz[]) as w(account_id, key, since)"
            " join request_time_buckets b"
            " on b.account_id = w.account_id and b.bucket_start >= w.since"
            f" group by w.account_id, w.key{extra}",
            [
                [window.account_id for window in windows],
                [window.key for window in windows],
                [bucket_start_for(window.since) for window in windows],
            ],
        )
        width = 4 if by_model else 2
        return {tuple(row[:width]): _sums(row[width:]) for row in cursor.fetchall()}


def bucket_account_tokens(*, start: datetime, account_ids: list[str]) -> dict[str, int]:
    """Input + output tokens of each account in buckets since ``start``."""
    if not account_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "select account_id, coalesce(sum(input_tokens + output_tokens), 0)"
            " from request_time_buckets where bucket_start >= %s and account_id = any(%s)"
            " group by account_id",
            [start, list(account_ids)],
        )
        return {account_id: int(tokens) for account_id, tokens in cursor.fetchall()}
