"""The dashboard's range tabs (``dashboard/summary?range=…``): the traffic, token, cost and
latency cards of today, the last 7 or 30 days or a custom span of days, next to the same
figures of as many days before, and the range's hours or days for the charts.

Everything comes from ``request_time_buckets`` (seed 004 §5.3: period traffic cards come from
the buckets): requests = successes + failures, tokens and latencies of successes, the cost
priced per model and service tier of each bucket (no long-context surcharge). Days are the
dashboard's days (the console's zone, CONSOLE_TIME_ZONE, like its other cards).
"""

from __future__ import annotations

from datetime import datetime

from proxy.admin_api.display import console_iso, console_zone, milliseconds, number, percent, usd
from telemetry.queries.usage_analytics import UsageSums, bucket_range_totals, usage_analysis
from telemetry.queries.usage_ranges import UsageRange, usage_range

PREVIOUS_LABELS = {
    "today": "yesterday",
    "7d": "the 7 days before",
    "30d": "the 30 days before",
}


def dashboard_range(
    name: str | None, *, now: datetime, first_day: str | None, last_day: str | None
) -> UsageRange:
    """The range of the dashboard's tab ``name`` (today when empty), in its days; raises
    ``telemetry.queries.usage_ranges.RangeError``."""
    return usage_range(name, now=now, zone=console_zone(), first_day=first_day, last_day=last_day)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _cards(sums: UsageSums) -> dict:
    hit_rate = sums.cache_hit_rate
    error_rate = sums.error_rate
    first_token, latency = sums.average_first_token_ms, sums.average_latency_ms
    return {
        "requests": number(sums.requests),
        "requestsValue": sums.requests,
        "successes": number(sums.success),
        "successesValue": sums.success,
        "errors": number(sums.errors),
        "errorsValue": sums.errors,
        "errorRate": percent(error_rate),
        "errorRateValue": _rounded(error_rate),
        "tokens": number(sums.total_tokens),
        "tokensValue": sums.total_tokens,
        "inputTokensValue": sums.input_tokens,
        "outputTokensValue": sums.output_tokens,
        "cachedTokensValue": sums.cached_tokens,
        "costUsd": usd(sums.actual_cost),
        "costUsdValue": round(sums.actual_cost, 6),
        "cacheHitRate": percent(hit_rate),
        "cacheHitRateValue": _rounded(hit_rate),
        "averageFirstTokenMs": milliseconds(first_token),
        "averageFirstTokenMsValue": _rounded(first_token),
        "averageLatencyMs": milliseconds(latency),
        "averageLatencyMsValue": _rounded(latency),
    }


def range_block(chosen: UsageRange) -> dict:
    """The summary's ``range``: the cards now and before, and one point per period (hours of a
    single day, else days) — a period without traffic has ``null`` latencies (nothing was
    measured), zero counts."""
    analysis = usage_analysis(chosen, by="model", with_sample=False)
    before = chosen.previous()
    points = []
    for index, sums in enumerate(analysis.series):
        points.append(
            {
                "time": chosen.period_label(index),
                "start": console_iso(chosen.period_starts[index]),
                "requestsValue": sums.requests,
                "errorsValue": sums.errors,
                "inputTokensValue": sums.input_tokens,
                "outputTokensValue": sums.output_tokens,
                "cachedTokensValue": sums.cached_tokens,
                "costUsdValue": round(sums.actual_cost, 6),
                "firstTokenLatencyValue": _rounded(sums.average_first_token_ms),
                "latencyValue": _rounded(sums.average_latency_ms),
                "maxLatencyValue": sums.max_latency_ms if sums.latency_count else None,
            }
        )
    return {
        "name": chosen.name,
        "label": chosen.label,
        "period": chosen.period,
        "timeZone": str(console_zone()),
        "firstDay": chosen.first_day.isoformat(),
        "lastDay": chosen.last_day.isoformat(),
        "start": console_iso(chosen.start),
        "end": console_iso(chosen.end),
        "cards": _cards(analysis.totals),
        "previous": {
            "label": PREVIOUS_LABELS.get(chosen.name) or before.label,
            "cards": _cards(bucket_range_totals(before)),
        },
        "points": points,
    }
