"""The policy a ``/v1`` request carries and the checks that need no store.

Read together with the client key (``proxy/v1/auth.py`` LEFT JOINs the policy row, so a key
without one costs nothing). Budgets are in micro-dollars here so that Redis adds integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from proxy.models_catalog import resolve_alias

MICRO = 1_000_000
WINDOW_SECONDS = 60
ACCOUNT_GROUP_PREFIX = "group:"


def usd_to_micro(value: Decimal | float | str | None) -> int | None:
    return None if value is None else int(Decimal(str(value)) * MICRO)


@dataclass(frozen=True)
class KeyPolicy:
    """The limits of one key; None = unlimited. ``allowed_models`` holds alias-resolved
    names (None = every model)."""

    key_id: str
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    daily_budget_micro: int | None = None
    monthly_budget_micro: int | None = None
    allowed_models: frozenset[str] | None = None
    account_group: str | None = None

    @property
    def has_budget(self) -> bool:
        return self.daily_budget_micro is not None or self.monthly_budget_micro is not None

    def allows_model(self, resolved_model: str) -> bool:
        return self.allowed_models is None or resolved_model in self.allowed_models


def resolved_model_names(names: list | None, aliases: dict[str, str]) -> frozenset[str] | None:
    """A policy's allowed models after alias resolution (None: every model)."""
    if names is None:
        return None
    return frozenset(resolve_alias(str(name), aliases) for name in names)


def policy_from_row(
    key_id: str, columns: tuple | None, aliases: dict[str, str]
) -> KeyPolicy | None:
    """The policy of the key lookup's policy columns (``POLICY_COLUMNS_SQL`` order), or None
    when the key has no policy row (its first column, the key id, is NULL)."""
    if columns is None or columns[0] is None:
        return None
    _, rpm, tpm, concurrency, daily, monthly, allowed, group = columns
    return KeyPolicy(
        key_id=key_id,
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
        max_concurrent_requests=concurrency,
        daily_budget_micro=usd_to_micro(daily),
        monthly_budget_micro=usd_to_micro(monthly),
        allowed_models=resolved_model_names(allowed, aliases),
        account_group=group,
    )


# The policy columns of the key lookup (``p`` = client_api_key_policies LEFT JOINed on the key).
POLICY_COLUMNS_SQL = """p.key_id, p.requests_per_minute, p.tokens_per_minute,
       p.max_concurrent_requests, p.daily_budget_usd, p.monthly_budget_usd, p.allowed_models,
       p.account_group"""
POLICY_COLUMN_COUNT = 8


# ----------------------------------------------------------------------------- calendar
# Budgets run on UTC calendar days and months.


def day_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(now: datetime) -> datetime:
    return day_start(now).replace(day=1)


def next_day_start(now: datetime) -> datetime:
    return day_start(now) + timedelta(days=1)


def next_month_start(now: datetime) -> datetime:
    start = month_start(now)
    return (start + timedelta(days=32)).replace(day=1)


def day_label(now: datetime) -> str:
    return day_start(now).strftime("%Y-%m-%d")


def month_label(now: datetime) -> str:
    return month_start(now).strftime("%Y-%m")


def tokens_window_start(now_ms: int) -> int:
    """The start (epoch seconds) of the fixed 60 s tokens-per-minute window holding ``now_ms``."""
    now_seconds = now_ms // 1000
    return now_seconds - now_seconds % WINDOW_SECONDS
