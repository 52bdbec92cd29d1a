"""A month and a bit of ledger facts for the usage analytics tests: successes every day and
failures most days, spread over accounts, client keys, two models and two routes; what a test
expects is computed from these facts, never read back from the code under test."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from telemetry.services.facts import ErrorFact, UsageFact
from telemetry.services.ledger import ledger_write_batch

DAYS = 35  # today and the 34 days before it
MODELS = ("gpt-5.4", "gpt-5.5")
ROUTES = ("/v1/responses", "/v1/chat/completions")


@dataclass(frozen=True)
class MonthOfFacts:
    now: datetime
    successes: list[UsageFact]
    failures: list[ErrorFact]

    def successes_between(self, start: datetime, end: datetime, **equal) -> list[UsageFact]:
        return [
            fact
            for fact in self.successes
            if start <= fact.created_at < end
            and all(getattr(fact, name) == value for name, value in equal.items())
        ]

    def failures_between(self, start: datetime, end: datetime, **equal) -> list[ErrorFact]:
        return [
            fact
            for fact in self.failures
            if start <= fact.created_at < end
            and all(getattr(fact, name) == value for name, value in equal.items())
        ]


def midnight(now: datetime, zone: tzinfo, *, days_back: int = 0) -> datetime:
    """Local midnight of ``zone``, ``days_back`` days before today's, in UTC."""
    local = now.astimezone(zone).replace(hour=0, minute=0, second=0, microsecond=0)
    return (local - timedelta(days=days_back)).astimezone(UTC)


def _moments(now: datetime, day: int, count: int) -> list[datetime]:
    """``count`` instants of the UTC day ``day`` days back; today's all before ``now``."""
    start = midnight(now, UTC, days_back=day)
    if day == 0:
        elapsed = now - start
        return [start + elapsed * (index + 1) / (count + 2) for index in range(count)]
    return [start + timedelta(hours=1 + 4 * index, minutes=7 * index) for index in range(count)]


def write_month_of_facts(
    now: datetime, *, account_ids: Sequence[str], key_ids: Sequence[str]
) -> MonthOfFacts:
    """Write the facts (and their buckets, through the ledger) of ``DAYS`` days up to ``now``."""
    successes, failures = [], []
    serial = 0
    for day in range(DAYS):
        count = 3 + day % 4
        for index, moment in enumerate(_moments(now, day, count)):
            serial += 1
            successes.append(
                UsageFact(
                    created_at=moment,
                    model=MODELS[serial % 2],
                    message="v1 responses completed",
                    account_id=account_ids[serial % len(account_ids)],
                    client_api_key_id=key_ids[(serial // 2) % len(key_ids)],
                    route=ROUTES[0] if serial % 5 else ROUTES[1],
                    service_tier="flex" if serial % 7 == 0 else None,
                    request_id=f"req_{serial}",
                    input_tokens=1000 + 37 * index + 11 * day,
                    output_tokens=200 + 13 * index,
                    cached_tokens=100 * (serial % 3),
                    reasoning_tokens=50 + index,
                    latency_ms=700 + 97 * ((serial * 7 + day) % 13),
                    first_token_ms=120 + 31 * ((serial * 5 + day) % 11),
                )
            )
        for index, moment in enumerate(_moments(now, day, day % 3)):
            serial += 1
            failures.append(
                ErrorFact(
                    created_at=moment + timedelta(minutes=3),
                    message="v1 responses upstream request failed",
                    provider="openai",
                    account_id=account_ids[serial % len(account_ids)],
                    model=MODELS[serial % 2],
                    client_api_key_id=key_ids[serial % len(key_ids)],
                    route=ROUTES[0],
                    status_code=502 if serial % 2 else 429,
                    failure_class="upstream_unavailable" if serial % 2 else "rate_limited",
                    latency_ms=300 + index,
                )
            )
    # Today's failures stay in the past too.
    failures = [fact for fact in failures if fact.created_at < now]
    ledger_write_batch(usage_facts=successes, error_facts=failures)
    return MonthOfFacts(now=now, successes=successes, failures=failures)
