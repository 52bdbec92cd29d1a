"""Each client key's requests and cost in two periods (the console's key list, issue 38): one
grouped query over ``usage_records`` (priced like the usage pages, tier multipliers applied)
and one count over ``ops_error_logs``, both on the seed's ``(client_api_key_id, created_at)``
partial indexes, for the keys of one page.

Every request leaves one of the two rows (a success a usage record, a failure an ops error), so
their sum is the key's request count; a request refused before its key was known (a 401) has
no key and counts for none.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import BooleanField, Case, Count, F, Value, When

from telemetry.models import OpsErrorLog, UsageRecord
from telemetry.queries.usage import cost_groups


@dataclass
class PeriodTotals:
    """Requests (``failed`` of them) and their cost in USD (tier multipliers applied)."""

    requests: int = 0
    failed: int = 0
    cost_usd: float = 0.0


@dataclass
class KeyTotals:
    """A key's totals in the short period (``day``) and the long one (``month``) it is in."""

    day: PeriodTotals
    month: PeriodTotals


def key_totals(
    key_ids: Iterable[str], *, day_start: datetime, month_start: datetime, now: datetime
) -> dict[str, KeyTotals]:
    """Each of ``key_ids``' totals from ``month_start`` and from ``day_start`` (inside the
    month) up to ``now``; a key without rows has zeros. Two queries, whatever the count."""
    wanted = list(dict.fromkeys(key_ids))
    totals = {key_id: KeyTotals(day=PeriodTotals(), month=PeriodTotals()) for key_id in wanted}
    if not wanted:
        return totals
    in_day = Case(
        When(created_at__gte=day_start, then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )
    successes = UsageRecord.objects.filter(
        client_api_key_id__in=wanted, created_at__gte=month_start, created_at__lte=now
    )
    groups = cost_groups(successes, by={"key": F("client_api_key_id"), "in_day": in_day})
    for (key_id, today), sums in groups.items():
        periods = (totals[key_id].month, totals[key_id].day) if today else (totals[key_id].month,)
        for period in periods:
            period.requests += sums.requests
            period.cost_usd += sums.actual_cost
    failures = (
        OpsErrorLog.objects.filter(
            client_api_key_id__in=wanted, created_at__gte=month_start, created_at__lte=now
        )
        .annotate(in_day=in_day)
        .values("client_api_key_id", "in_day")
        .annotate(count=Count("id"))
        .order_by()
    )
    for row in failures:
        key = totals[str(row["client_api_key_id"])]
        for period in (key.month, key.day) if row["in_day"] else (key.month,):
            period.requests += row["count"]
            period.failed += row["count"]
    return totals
