"""The dashboard's numbers (spec §6.7), each from the table seed 004 §5 names:

* traffic and token cards, the hourly trend and the health timeline — ``request_time_buckets``
  (requests = success + error; tokens and latency: successes only);
* lifetime totals — ``account_usage`` (the one lifetime source, §5.3);
* today's cost and the latest records — ``usage_records`` (priced per request, never stored);
* accounts, pool and capacity — ``accounts``, the refresh leases and the scheduler's slots.

"Today" is the console's day (``CONSOLE_TIME_ZONE``; China by default, spec §0).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Sum
from django.db.models.functions import Coalesce

from proxy.admin_api import pool
from proxy.admin_api.dashboard_range import dashboard_range, range_block
from proxy.admin_api.display import (
    china_midnight,
    china_time,
    console_zone,
    milliseconds,
    number,
    percent,
    ratio_percent,
    relative,
    usd,
)
from proxy.admin_api.quota_windows import preferred_used_percent, quota_windows
from proxy.admin_api.runway import quota_runway
from proxy.admin_api.selectors import pool_summary
from proxy.admin_api.usage_items import account_emails, usage_item
from proxy.models import Account, AccountStatus, AccountUsage, Fingerprint, RuntimeSettings
from telemetry.queries.buckets import (
    BucketSums,
    bucket_account_tokens,
    bucket_slots,
    bucket_totals,
    slot_starts,
)
from telemetry.queries.usage import FactFilters, cost_groups, usage_records
from telemetry.queries.usage_ranges import UsageRange

SLOTS_PER_DAY = 96
SLOT = timedelta(minutes=15)
TREND_KINDS = ("usage", "latency", "errors")
HEALTHY_SUCCESS_RATE = 90.0
FEW_SUCCESSES = 3


def _pair(name: str, value) -> dict:
    """``{name: display, nameValue: value}``: the console reads both."""
    return {name: number(value), f"{name}Value": value}


def lifetime_totals() -> dict[str, int]:
    return AccountUsage.objects.aggregate(
        requests=Coalesce(Sum("request_count"), 0),
        tokens=Coalesce(Sum("total_tokens"), 0),
        input=Coalesce(Sum("input_tokens"), 0),
        cached=Coalesce(Sum("cached_tokens"), 0),
    )


def today_cost(*, midnight: datetime) -> float:
    groups = cost_groups(usage_records(FactFilters(start=midnight)))
    return sum(sums.actual_cost for sums in groups.values())


def cards(*, now: datetime) -> dict:
    midnight = china_midnight(now)
    today = bucket_totals(start=midnight, end=midnight + timedelta(days=1))
    yesterday = bucket_totals(start=midnight - timedelta(days=1), end=midnight)
    lifetime = lifetime_totals()
    statuses = list(Account.objects.values_list("status", flat=True))
    active = sum(1 for status in statuses if status == AccountStatus.ACTIVE)
    cost = today_cost(midnight=midnight)
    today_hit = ratio_percent(today.cached_tokens, today.input_tokens)
    yesterday_hit = ratio_percent(yesterday.cached_tokens, yesterday.input_tokens)
    total_hit = ratio_percent(lifetime["cached"], lifetime["input"])
    first_token = today.average_first_token_ms
    return {
        "accounts": {
            **_pair("total", len(statuses)),
            **_pair("enabled", active),
            **_pair("abnormal", len(statuses) - active),
        },
        "traffic": {
            **_pair("todayRequests", today.requests),
            **_pair("yesterdayRequests", yesterday.requests),
            **_pair("totalRequests", lifetime["requests"]),
            **_pair("todayErrors", today.errors),
        },
        "tokens": {
            **_pair("todayTokens", today.total_tokens),
            **_pair("yesterdayTokens", yesterday.total_tokens),
            **_pair("totalTokens", lifetime["tokens"]),
            "todayCostUsd": usd(cost),
            "todayCostUsdValue": round(cost, 6),
        },
        "cache": {
            "todayHitRate": percent(today_hit),
            "todayHitRateValue": today_hit,
            "yesterdayHitRate": percent(yesterday_hit),
            "yesterdayHitRateValue": yesterday_hit,
            "totalHitRate": percent(total_hit),
            "totalHitRateValue": total_hit,
            **_pair("totalCachedTokens", lifetime["cached"]),
            "averageFirstTokenLatencyMs": milliseconds(first_token),
            "averageFirstTokenLatencyMsValue": round(first_token, 1) if first_token else None,
        },
    }


def _hour_point(hour: int, slots: list[BucketSums]) -> dict:
    total = BucketSums()
    averages = []
    for sums in slots:
        for name in (
            "success",
            "errors",
            "input_tokens",
            "output_tokens",
            "cached_tokens",
            "first_token_sum",
            "first_token_count",
        ):
            setattr(total, name, getattr(total, name) + getattr(sums, name))
        if sums.average_first_token_ms is not None:
            averages.append(sums.average_first_token_ms)
    # The original's points are numbers in every hour (f64 in its dashboard.rs), and its console
    # plots them: an hour without traffic says 0, not null.
    latency = total.average_first_token_ms or 0.0
    success_rate = ratio_percent(total.success, total.requests) or 0.0
    hit_rate = ratio_percent(total.cached_tokens, total.input_tokens) or 0.0
    slowest, fastest = (max(averages), min(averages)) if averages else (0.0, 0.0)
    return {
        "time": f"{hour:02d}",
        **_pair("requests", total.requests),
        **_pair("inputTokens", total.input_tokens),
        **_pair("outputTokens", total.output_tokens),
        **_pair("cachedTokens", total.cached_tokens),
        "tokensValue": total.total_tokens,
        "cacheHitRate": percent(hit_rate),
        "cacheHitRateValue": hit_rate,
        **_pair("errors", total.errors),
        "latency": milliseconds(latency),
        "latencyValue": round(latency, 1),
        "maxLatency": milliseconds(slowest),
        "maxLatencyValue": round(slowest, 1),
        "minLatency": milliseconds(fastest),
        "minLatencyValue": round(fastest, 1),
        "successRate": percent(success_rate),
        "successRateValue": success_rate,
    }


def trend(*, now: datetime, kind: str) -> dict:
    """Today's hours (the console's zone) up to the current one, and three summary figures
    for ``kind``."""
    midnight = china_midnight(now)
    slots = bucket_slots(start=midnight, end=midnight + timedelta(days=1))
    zone = console_zone()
    current_hour = now.astimezone(zone).hour
    by_hour: dict[int, list[BucketSums]] = {hour: [] for hour in range(current_hour + 1)}
    for start, sums in slots.items():
        hour = start.astimezone(zone).hour
        if hour in by_hour:
            by_hour[hour].append(sums)
    points = [_hour_point(hour, by_hour[hour]) for hour in sorted(by_hour)]
    total = bucket_totals(start=midnight, end=midnight + timedelta(days=1))
    success_rate = ratio_percent(total.success, total.requests)
    if kind == "latency":
        latencies = [point["latencyValue"] for point in points if point["latencyValue"]]
        summary = [
            _summary("Average first token", milliseconds(total.average_first_token_ms), None),
            _summary("Slowest hour", milliseconds(max(latencies) if latencies else None), None),
            _summary("Fastest hour", milliseconds(min(latencies) if latencies else None), None),
        ]
    elif kind == "errors":
        error_rate = ratio_percent(total.errors, total.requests)
        summary = [
            _summary("Errors", number(total.errors), error_rate),
            _summary("Success rate", percent(success_rate), success_rate),
            _summary("Error rate", percent(error_rate), error_rate),
        ]
    else:
        hit_rate = ratio_percent(total.cached_tokens, total.input_tokens)
        summary = [
            _summary("Requests", number(total.requests), success_rate),
            _summary("Tokens", number(total.total_tokens), None),
            _summary("Cache hit rate", percent(hit_rate), hit_rate),
        ]
    return {"kind": kind, "points": points, "summary": summary}


def _summary(label: str, value: str, ratio: float | None) -> dict:
    return {"label": label, "value": value, "ratio": ratio}


def slot_health(sums: BucketSums | None, *, future: bool) -> str:
    """One character of the health timeline (spec §6.7)."""
    if future:
        return "0"
    if sums is None or sums.requests == 0:
        return "1"
    if sums.success == 0:
        return "2"
    if 100.0 * sums.success / sums.requests < HEALTHY_SUCCESS_RATE:
        return "3"
    if sums.success < FEW_SUCCESSES:
        return "4"
    return "5"


def health_timeline(*, now: datetime) -> dict:
    midnight = china_midnight(now)
    slots = bucket_slots(start=midnight, end=midnight + timedelta(days=1))
    points = "".join(
        slot_health(slots.get(start), future=start > now)
        for start in slot_starts(start=midnight, count=SLOTS_PER_DAY)
    )
    total = bucket_totals(start=midnight, end=midnight + timedelta(days=1))
    reliability = ratio_percent(total.success, total.requests)
    return {
        "title": "Request health today",
        "description": f"One cell per 15 minutes ({console_zone()} time): grey no traffic, red "
        "all failed, orange under 90 % success, yellow under 3 successes, green healthy.",
        "reliability": reliability,
        "reliabilityDisplay": percent(reliability) if reliability is not None else "-",
        "points": points,
    }


def account_usage_today(*, now: datetime, limit: int = 4) -> list[dict]:
    midnight = china_midnight(now)
    recent = list(
        AccountUsage.objects.filter(last_used_at__gte=midnight)
        .select_related("account")
        .order_by("-last_used_at")[:limit]
    )
    tokens = bucket_account_tokens(start=midnight, account_ids=[row.account_id for row in recent])
    items = []
    for row in recent:
        account = row.account
        used = preferred_used_percent(quota_windows(account.quota_json))
        if account.status == AccountStatus.QUOTA_EXHAUSTED:
            used = 100.0
        items.append(
            {
                "id": account.pk,
                "email": account.email or "",
                "planType": account.plan_type,
                "tokens": tokens.get(account.pk, 0),
                "tokensDisplay": number(tokens.get(account.pk, 0)),
                "quotaUsedPercent": used,
                "lastUsed": relative(row.last_used_at, now=now),
                "lastUsedAt": china_time(row.last_used_at),
            }
        )
    return items


def service_statuses() -> list[dict]:
    fingerprint = Fingerprint.objects.filter(id=Fingerprint.CURRENT_ID).first()
    if fingerprint is None:
        return [
            {"label": "Fingerprint", "value": "not seeded yet", "detail": "", "tone": "warning"}
        ]
    user_agent = (
        fingerprint.user_agent_template.replace("{version}", fingerprint.app_version)
        .replace("{platform}", fingerprint.platform)
        .replace("{arch}", fingerprint.arch)
    )
    return [
        {
            "label": "Client version",
            "value": f"{fingerprint.app_version} ({fingerprint.build_number})",
            "detail": f"source: {fingerprint.source}",
            "tone": "success",
        },
        {
            "label": "Platform",
            "value": f"{fingerprint.platform} / {fingerprint.arch}",
            "detail": "",
            "tone": "info",
        },
        {
            "label": "Chromium / originator",
            "value": f"{fingerprint.chromium_version} / {fingerprint.originator}",
            "detail": "",
            "tone": "info",
        },
        {
            "label": "Updated",
            "value": china_time(fingerprint.updated_at),
            "detail": "",
            "tone": "info",
        },
        {"label": "User-Agent", "value": user_agent, "detail": "", "tone": "info"},
    ]


def latest_records(*, now: datetime, limit: int = 10) -> list[dict]:
    rows = list(
        usage_records(FactFilters(start=china_midnight(now))).order_by("-created_at", "-id")[:limit]
    )
    emails = account_emails(row.account_id for row in rows)
    return [usage_item(row, emails=emails) for row in rows]


def capacity(*, now: datetime) -> tuple[dict, str]:
    row = (
        RuntimeSettings.objects.filter(id=RuntimeSettings.SINGLETON_ID)
        .values("max_concurrent_per_account", "rotation_strategy")
        .first()
    ) or {"max_concurrent_per_account": 3, "rotation_strategy": "smart"}
    per_account = row["max_concurrent_per_account"]
    eligible = [
        account.pk
        for account in Account.objects.filter(
            status__in=(AccountStatus.ACTIVE, AccountStatus.QUOTA_EXHAUSTED)
        )
        if pool.ineligibility(account, now=now) is None
    ]
    used = sum(pool.slots_in_use(eligible).values())
    total = len(eligible) * per_account
    return (
        {
            "maxConcurrentPerAccount": per_account,
            "eligibleAccounts": len(eligible),
            "totalSlots": total,
            "usedSlots": used,
            "availableSlots": max(0, total - used),
        },
        row["rotation_strategy"],
    )


def dashboard_summary(*, now: datetime, kind: str, chosen_range: UsageRange | None = None) -> dict:
    """Everything the dashboard shows; ``range`` is ``chosen_range``'s cards and points (today's
    when None; ``proxy.admin_api.dashboard_range``)."""
    capacity_info, strategy = capacity(now=now)
    chosen_range = chosen_range or dashboard_range(None, now=now, first_day=None, last_day=None)
    return {
        "cards": cards(now=now),
        "trend": trend(now=now, kind=kind),
        "healthTimeline": health_timeline(now=now),
        "accountUsage": account_usage_today(now=now),
        "serviceStatuses": service_statuses(),
        "usageRecords": latest_records(now=now),
        "poolSummary": pool_summary(),
        "capacityInfo": capacity_info,
        "rotationStrategy": strategy,
        "quotaRunway": quota_runway(now=now),
        "range": range_block(chosen_range),
        "generatedAt": china_time(now),
    }
