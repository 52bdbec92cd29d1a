"""A key's spend today and this month (UTC), from ``usage_records`` priced by telemetry's
price table — the same figure the usage pages show as the actual cost (tier multipliers
applied). One grouped query over the key's rows of the month (index ``key_created``); the
result is cached in Redis for 60 s by the caller, so it runs at most once a minute per key.

Only successful requests have usage rows, so only they cost; a month longer than the usage
retention (``usage_retention_days``, 30 by default) loses its first trimmed day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import BooleanField, Case, Value, When

from proxy.domain.key_policy import MICRO, day_start, month_start
from telemetry.models import UsageRecord
from telemetry.queries.usage import cost_groups


@dataclass(frozen=True)
class Spend:
    day_micro: int
    month_micro: int


def key_spend(key_id: str, *, now: datetime) -> Spend:
    """The spend of ``key_id`` in micro-USD: today and this month (UTC), up to ``now``."""
    today = day_start(now)
    records = UsageRecord.objects.filter(
        client_api_key_id=key_id, created_at__gte=month_start(now), created_at__lte=now
    )
    is_today = Case(
        When(created_at__gte=today, then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )
    groups = cost_groups(records, by={"today": is_today})
    day = groups[True].actual_cost if True in groups else 0.0
    month = sum(sums.actual_cost for sums in groups.values())
    return Spend(day_micro=round(day * MICRO), month_micro=round(month * MICRO))
