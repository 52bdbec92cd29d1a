"""The usage records and ops errors lists, their summary, insights and cost groups.

Filters are equalities on first-class columns (each backed by one of the seed's indexes) and a
time range; ``search`` is the seed's boundary (§4.7): ``message ILIKE`` or an exact request /
response / upstream request id — never ``metadata_json`` (no JSON operators on it at all).
Costs are computed here from the token columns at query time (``telemetry.billing``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import (
    Avg,
    Case,
    Count,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Concat, Least, TruncDate
from django.utils import timezone

from telemetry.billing import LONG_CONTEXT_INPUT_TOKENS, prices_for, tier_of, tokens_cost
from telemetry.models import OpsErrorLog, UsageRecord

TOP_INSIGHTS = 8

USAGE_EQUALITY_FILTERS = {
    "kind": "kind",
    "clientApiKeyId": "client_api_key_id",
    "provider": "provider",
    "requestId": "request_id",
    "accountId": "account_id",
    "route": "route",
    "model": "model",
    "statusCode": "status_code",
    "transport": "transport",
    "attemptIndex": "attempt_index",
    "responseId": "response_id",
    "upstreamRequestId": "upstream_request_id",
}
OPS_EQUALITY_FILTERS = {
    **USAGE_EQUALITY_FILTERS,
    "clientStatusCode": "client_status_code",
    "upstreamStatusCode": "upstream_status_code",
    "failureClass": "failure_class",
}
INTEGER_FILTERS = frozenset(
    {"statusCode", "attemptIndex", "clientStatusCode", "upstreamStatusCode"}
)


@dataclass(frozen=True)
class FactFilters:
    """What a list or summary is restricted to (API field names → values)."""

    equal: dict[str, Any] = field(default_factory=dict)
    search: str | None = None
    start: datetime | None = None
    end: datetime | None = None


def _filtered(queryset: QuerySet, filters: FactFilters, columns: dict[str, str]) -> QuerySet:
    for name, value in filters.equal.items():
        queryset = queryset.filter(**{columns[name]: value})
    if filters.start is not None:
        queryset = queryset.filter(created_at__gte=filters.start)
    if filters.end is not None:
        queryset = queryset.filter(created_at__lt=filters.end)
    if filters.search:
        term = filters.search
        queryset = queryset.filter(
            Q(message__icontains=term)
            | Q(request_id=term)
            | Q(response_id=term)
            | Q(upstream_request_id=term)
        )
    return queryset


def usage_records(filters: FactFilters) -> QuerySet:
    return _filtered(UsageRecord.objects.all(), filters, USAGE_EQUALITY_FILTERS)


def ops_errors(filters: FactFilters) -> QuerySet:
    return _filtered(OpsErrorLog.objects.all(), filters, OPS_EQUALITY_FILTERS)


def usage_summary(records: QuerySet) -> dict[str, Any]:
    """Request count, token sums and the average end-to-end latency of ``records``."""
    totals = records.aggregate(
        requests=Count("id"),
        input=Coalesce(Sum("input_tokens"), 0),
        output=Coalesce(Sum("output_tokens"), 0),
        cached=Coalesce(Sum("cached_tokens"), 0),
        reasoning=Coalesce(Sum("reasoning_tokens"), 0),
        latency=Avg("latency_ms"),
        first_token=Avg("first_token_ms"),
    )
    totals["total"] = totals["input"] + totals["output"]
    return totals


@dataclass
class CostSums:
    """Token sums of a group and what they cost (list price, and with the tiers applied)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    latency_sum: int = 0
    latency_count: int = 0
    cost: float = 0.0  # before tier multipliers
    actual_cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def average_latency_ms(self) -> float | None:
        return self.latency_sum / self.latency_count if self.latency_count else None


_LONG = Case(
    When(input_tokens__gt=LONG_CONTEXT_INPUT_TOKENS, then=Value(True)), default=Value(False)
)
_PRICED_GROUP = ("model", "service_tier", "long_context")


def cost_groups(records: QuerySet, *, by: dict[str, Any] | None = None) -> dict[Any, CostSums]:
    """``records`` summed per ``by`` (name → expression; none: one group ``None``), priced per
    model, tier and context size (one query, grouped in PostgreSQL)."""
    by = by or {}
    rows = (
        records.annotate(long_context=_LONG, **by)
        .values(*by, *_PRICED_GROUP)
        .annotate(
            requests=Count("id"),
            input_sum=Coalesce(Sum("input_tokens"), 0),
            cached_sum=Coalesce(
                Sum(Least(Coalesce("cached_tokens", 0), Coalesce("input_tokens", 0))), 0
            ),
            output_sum=Coalesce(Sum("output_tokens"), 0),
            latency_sum=Coalesce(Sum("latency_ms"), 0),
            latency_count=Count("latency_ms"),
        )
        .order_by()
    )
    groups: dict[Any, CostSums] = defaultdict(CostSums)
    for row in rows:
        key = tuple(row[name] for name in by) if len(by) > 1 else row.get(next(iter(by), ""))
        sums = groups[key if by else None]
        priced_as, prices = prices_for(row["model"])
        priced = tokens_cost(
            priced_as=priced_as,
            prices=prices,
            tier=tier_of(row["service_tier"]),
            long_context=row["long_context"],
            input_tokens=row["input_sum"],
            cached_tokens=row["cached_sum"],
            output_tokens=row["output_sum"],
        )
        sums.requests += row["requests"]
        sums.input_tokens += row["input_sum"]
        sums.output_tokens += row["output_sum"]
        sums.cached_tokens += row["cached_sum"]
        sums.latency_sum += row["latency_sum"]
        sums.latency_count += row["latency_count"]
        sums.cost += priced.original
        sums.actual_cost += priced.total
    return dict(groups)


MODEL_SOURCES = {
    "requested": Coalesce("requested_model", "model"),
    "upstream": Coalesce("upstream_model", "model"),
    "mapping": Concat(
        Coalesce("requested_model", "model"),
        Value(" → "),
        Coalesce("upstream_model", "model"),
        output_field=TextField(),
    ),
}


def insights_by_model(records: QuerySet, *, source: str) -> list[tuple[str, CostSums]]:
    """The top 8 names of ``source`` (requested | upstream | mapping) by request count."""
    groups = cost_groups(records, by={"insight_name": MODEL_SOURCES[source]})
    return _top(groups)


def upstream_endpoint(route: str | None) -> str:
    """The upstream path a /v1 route is served by (spec §2.1)."""
    if route and route.endswith("/compact"):
        return "/codex/responses/compact"
    return "/codex/responses"


ENDPOINT_SOURCES = ("inbound", "upstream", "path")


def insights_by_endpoint(records: QuerySet, *, source: str) -> list[tuple[str, CostSums]]:
    """The top 8 endpoints: the client's route (inbound), the upstream path it used
    (upstream), or both as ``route → upstream`` (path)."""
    by_route = cost_groups(
        records, by={"insight_name": Coalesce("route", Value("-"), output_field=TextField())}
    )
    merged: dict[str, CostSums] = defaultdict(CostSums)
    for route, sums in by_route.items():
        if source == "inbound":
            name = route
        elif source == "upstream":
            name = upstream_endpoint(route)
        else:
            name = f"{route} → {upstream_endpoint(route)}"
        _add(merged[name], sums)
    return _top(merged)


def _add(target: CostSums, sums: CostSums) -> None:
    for name in (
        "requests",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "latency_sum",
        "latency_count",
        "cost",
        "actual_cost",
    ):
        setattr(target, name, getattr(target, name) + getattr(sums, name))


def _top(groups: dict) -> list[tuple[str, CostSums]]:
    ranked = sorted(groups.items(), key=lambda item: (-item[1].requests, str(item[0])))
    return [(str(name), sums) for name, sums in ranked[:TOP_INSIGHTS]]


def daily_usage(records: QuerySet) -> list[tuple[Any, CostSums]]:
    """Per day of the console's time zone (``TIME_ZONE`` = ``CONSOLE_TIME_ZONE``; oldest
    first): token sums, latency and cost."""
    zone = timezone.get_default_timezone()
    groups = cost_groups(records, by={"day": TruncDate("created_at", tzinfo=zone)})
    return sorted(groups.items(), key=lambda item: item[0])


def latest_error_by_account(account_ids: list[str]) -> dict[str, OpsErrorLog]:
    """Each account's newest ops error: one query, the newest entry of each account on
    ``idx_ops_error_logs_account`` (a lateral probe per account, not a walk through all of an
    account's errors)."""
    if not account_ids:
        return {}
    rows = OpsErrorLog.objects.raw(
        "select e.* from unnest(%s::text[]) as wanted(account_id)"
        " cross join lateral (select * from ops_error_logs o"
        " where o.account_id = wanted.account_id"
        " order by o.created_at desc, o.id desc limit 1) e",
        [list(dict.fromkeys(account_ids))],
    )
    # Every row has one (``account_id = any(...)``).
    return {row.account_id: row for row in rows if row.account_id is not None}


def usage_time_range(records: QuerySet) -> dict[str, Any]:
    return records.aggregate(first=Min("created_at"), last=Max("created_at"))
