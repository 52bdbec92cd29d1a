"""A key's use against its policy, for the consoles (admin API and Django admin): the live
counters from Redis and the spend (cached, or computed from ``usage_records`` when not)."""

from __future__ import annotations

from datetime import datetime

from proxy.domain.key_policy import MICRO
from proxy.models import ClientApiKeyPolicy
from proxy.policies.admission import periods_of
from proxy.policies.counters import live_usage
from proxy.policies.spend import key_spend
from proxy.runtime_state import redis_client


def key_policy_usage(policy: ClientApiKeyPolicy, *, now: datetime) -> dict:
    """``{"requestsLastMinute", "tokensThisMinute", "inFlight", "spentTodayUsd",
    "spentThisMonthUsd"}`` with each limit next to it (null = unlimited)."""
    at_ms = int(now.timestamp() * 1000)
    live = live_usage(redis_client(), policy.key_id, periods_of(now), at_ms=at_ms)
    day, month = live.day_spend_micro, live.month_spend_micro
    if day is None or month is None:
        spend = key_spend(policy.key_id, now=now)
        day, month = spend.day_micro, spend.month_micro
    return {
        "requestsLastMinute": live.requests_last_minute,
        "requestsPerMinute": policy.requests_per_minute,
        "tokensThisMinute": live.tokens_this_minute,
        "tokensPerMinute": policy.tokens_per_minute,
        "inFlight": live.in_flight,
        "maxConcurrentRequests": policy.max_concurrent_requests,
        "spentTodayUsd": round(day / MICRO, 6),
        "dailyBudgetUsd": _dollars(policy.daily_budget_usd),
        "spentThisMonthUsd": round(month / MICRO, 6),
        "monthlyBudgetUsd": _dollars(policy.monthly_budget_usd),
    }


def _dollars(value) -> float | None:
    return None if value is None else float(value)
