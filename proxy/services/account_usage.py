"""``account_usage`` (seed 004 §4.6): lifetime and window counters, added in one statement.

The lifetime counters cannot be rebuilt from the facts (they expire), so the only write is an
``INSERT … ON CONFLICT DO UPDATE`` that adds: concurrent writers never lose an increment.
The window group mirrors the upstream quota dimensions only (no reasoning/total tokens, by design).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime

from django.db import connection

from proxy.models import ACCOUNT_USAGE_COUNTERS


@dataclass(frozen=True)
class AccountUsageIncrement:
    """What one observation adds. ``counted_request`` = an upstream call was made."""

    counted_request: bool = False
    empty_response: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int | None = None  # defaults to input + output
    image_input_tokens: int = 0
    image_output_tokens: int = 0
    image_request: bool = False
    image_request_failed: bool = False

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{field.name} must not be negative")


# Built once from the constant column list (no outside input reaches it).
_UPSERT_HEAD = (
    "insert into account_usage as usage (account_id, "  # noqa: S608
    + ", ".join(ACCOUNT_USAGE_COUNTERS)
    + ", window_started_at, last_used_at) values "
)
_UPSERT_ROW = "(" + ", ".join(["%s"] * (len(ACCOUNT_USAGE_COUNTERS) + 3)) + ")"
_UPSERT_CONFLICT = (
    " on conflict (account_id) do update set "
    + ", ".join(
        f"{column} = usage.{column} + excluded.{column}" for column in ACCOUNT_USAGE_COUNTERS
    )
    + ", window_started_at = coalesce(usage.window_started_at, excluded.window_started_at)"
    + ", last_used_at = greatest(usage.last_used_at, excluded.last_used_at)"
)


def account_usage_add(*, account_id: str, increment: AccountUsageIncrement, now: datetime) -> None:
    """Add ``increment`` to the account's counters (creating its row on first use).

    A counted request also stamps ``last_used_at`` and starts the window if none is open.
    Raises IntegrityError if the account does not exist (the foreign key).
    """
    account_usage_add_many(increments=[(account_id, increment)], now=now)


def _values(increment: AccountUsageIncrement) -> dict[str, int]:
    """What ``increment`` adds to each counter column."""
    counted = 1 if increment.counted_request else 0
    total = (
        increment.total_tokens
        if increment.total_tokens is not None
        else increment.input_tokens + increment.output_tokens
    )
    image_requests = 1 if increment.image_request else 0
    image_failures = 1 if increment.image_request_failed else 0
    return {
        "request_count": counted,
        "empty_response_count": 1 if increment.empty_response else 0,
        "input_tokens": increment.input_tokens,
        "output_tokens": increment.output_tokens,
        "cached_tokens": increment.cached_tokens,
        "reasoning_tokens": increment.reasoning_tokens,
        "total_tokens": total,
        "image_input_tokens": increment.image_input_tokens,
        "image_output_tokens": increment.image_output_tokens,
        "image_request_count": image_requests,
        "image_request_failed_count": image_failures,
        "window_request_count": counted,
        "window_input_tokens": increment.input_tokens,
        "window_output_tokens": increment.output_tokens,
        "window_cached_tokens": increment.cached_tokens,
        "window_image_input_tokens": increment.image_input_tokens,
        "window_image_output_tokens": increment.image_output_tokens,
        "window_image_request_count": image_requests,
        "window_image_request_failed_count": image_failures,
    }


def account_usage_add_many(
    *, increments: list[tuple[str, AccountUsageIncrement]], now: datetime
) -> None:
    """``account_usage_add`` for many observations: summed per account, then one statement.

    Raises IntegrityError when an account no longer exists (the caller may then fall back to
    one statement per account).
    """
    # One row per account: a statement may not update the same row twice.
    totals_by_account: dict[str, dict[str, int]] = {}
    counted_accounts: set[str] = set()
    for account_id, increment in increments:
        totals = totals_by_account.setdefault(account_id, dict.fromkeys(ACCOUNT_USAGE_COUNTERS, 0))
        for column, value in _values(increment).items():
            totals[column] += value
        if increment.counted_request:
            counted_accounts.add(account_id)
    rows = []
    for account_id, totals in totals_by_account.items():
        stamp = now if account_id in counted_accounts else None
        rows.append(
            [account_id, *(totals[column] for column in ACCOUNT_USAGE_COUNTERS), stamp, stamp]
        )
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            _UPSERT_HEAD + ", ".join([_UPSERT_ROW] * len(rows)) + _UPSERT_CONFLICT,
            [value for row_values in rows for value in row_values],
        )
