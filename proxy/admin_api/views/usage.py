"""Usage records and ops errors (spec §6.6): lists with every filter, a record's detail, the
summary, the insights, and clearing the records. Costs come from ``telemetry.billing`` at
query time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema

from proxy.admin_api.display import (
    milliseconds,
    number,
    percent,
    ratio_percent,
    usd,
)
from proxy.admin_api.envelope import ApiError, BodyCode, bad_request, not_found, ok
from proxy.admin_api.fields import required_query
from proxy.admin_api.pagination import page_request, paginate
from proxy.admin_api.schema import ANY_DATA, PAGING_PARAMETERS, query
from proxy.admin_api.usage_items import account_emails, ops_error_item, usage_item
from proxy.admin_api.views.base import AdminAPIView
from telemetry.models import UsageRecord
from telemetry.queries.usage import (
    ENDPOINT_SOURCES,
    INTEGER_FILTERS,
    MODEL_SOURCES,
    OPS_EQUALITY_FILTERS,
    USAGE_EQUALITY_FILTERS,
    CostSums,
    FactFilters,
    daily_usage,
    insights_by_endpoint,
    insights_by_model,
    ops_errors,
    usage_records,
    usage_summary,
)
from telemetry.services.retention import usage_records_clear

LONGEST_FILTER_VALUE = 256
LARGEST_INTEGER = 2**31 - 1


def _time(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(BodyCode.INVALID_TIME_RANGE, f"{name} must be an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ApiError(BodyCode.INVALID_TIME_RANGE, f"{name} must carry a UTC offset")
    return moment


def fact_filters(query_params, *, columns: dict[str, str]) -> FactFilters:
    """The filters of a list request; 40001 / 40002 for values that cannot be one."""
    equal = {}
    for name in columns:
        raw = query_params.get(name)
        if raw is None or raw == "":
            continue
        if len(raw) > LONGEST_FILTER_VALUE:
            raise bad_request(f"{name} is too long")
        if name in INTEGER_FILTERS:
            try:
                value = int(raw)
            except ValueError:
                raise bad_request(f"{name} must be an integer") from None
            if not 0 <= value <= LARGEST_INTEGER:
                raise bad_request(f"{name} is out of range")
            equal[name] = value
        else:
            equal[name] = raw
    start = _time(query_params.get("startTime"), "startTime")
    end = _time(query_params.get("endTime"), "endTime")
    if start and end and start > end:
        raise ApiError(BodyCode.INVALID_TIME_RANGE, "startTime is after endTime")
    search = (query_params.get("search") or "").strip()
    if len(search) > LONGEST_FILTER_VALUE:
        raise bad_request("search is too long")
    return FactFilters(equal=equal, search=search or None, start=start, end=end)


def _filter_parameters(columns) -> list:
    return [
        *PAGING_PARAMETERS,
        *[query(name, f"Exactly this {name}") for name in columns],
        query("search", "Words of the message, or an exact request/response/upstream id"),
        query("startTime", "RFC 3339; from this time on"),
        query("endTime", "RFC 3339; before this time"),
    ]


class UsageRecordsView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Usage records (successes), newest first, with their cost",
        parameters=_filter_parameters(USAGE_EQUALITY_FILTERS),
        responses={200: ANY_DATA},
    )
    def get(self, request):
        filters = fact_filters(request.query_params, columns=USAGE_EQUALITY_FILTERS)

        def present(rows):
            emails = account_emails(row.account_id for row in rows)
            return [usage_item(row, emails=emails) for row in rows]

        return ok(
            paginate(
                usage_records(filters),
                time_column="created_at",
                request=page_request(request.query_params),
                present=present,
            )
        )


class UsageRecordDetailView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="One usage record",
        parameters=[query("id", "The record's id", required=True)],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        record = UsageRecord.objects.filter(pk=required_query(request, "id")).first()
        if record is None:
            raise not_found("Usage record not found")
        return ok(usage_item(record, emails=account_emails([record.account_id])))


class UsageRecordsClearView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Delete every usage record (buckets and account counters stay)",
        request=None,
        responses={200: ANY_DATA},
    )
    def post(self, request):
        return ok({"cleared": usage_records_clear()})


class UsageSummaryView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Request count, tokens and average latency of the filtered records",
        parameters=_filter_parameters(USAGE_EQUALITY_FILTERS)[3:],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        filters = fact_filters(request.query_params, columns=USAGE_EQUALITY_FILTERS)
        totals = usage_summary(usage_records(filters))
        values = {
            "totalRequests": totals["requests"],
            "inputTokens": totals["input"],
            "outputTokens": totals["output"],
            "cachedTokens": totals["cached"],
            "reasoningTokens": totals["reasoning"],
            "totalTokens": totals["total"],
        }
        data: dict[str, Any] = {name: number(value) for name, value in values.items()}
        data.update({f"{name}Value": value for name, value in values.items()})
        data["averageLatencyMs"] = milliseconds(totals["latency"])
        data["averageLatencyMsValue"] = (
            round(totals["latency"], 1) if totals["latency"] is not None else None
        )
        data["averageFirstTokenMsValue"] = (
            round(totals["first_token"], 1) if totals["first_token"] is not None else None
        )
        return ok(data)


def _sums_figures(sums: CostSums) -> dict:
    """The figures insights and trends share: counts, tokens, costs, latency (each as display
    string and ``…Value`` number)."""
    average = sums.average_latency_ms
    figures: dict = {}
    for name, value in (
        ("requestCount", sums.requests),
        ("inputTokens", sums.input_tokens),
        ("outputTokens", sums.output_tokens),
        ("cachedTokens", sums.cached_tokens),
        ("totalTokens", sums.total_tokens),
    ):
        figures[name] = number(value)
        figures[f"{name}Value"] = value
    for name, cost in (
        ("cost", sums.cost),
        ("actualCost", sums.actual_cost),
        # The original's console shows it; there is no separate account pricing here.
        ("accountCost", sums.actual_cost),
    ):
        figures[name] = usd(cost)
        figures[f"{name}Value"] = round(cost, 6)
    figures["averageLatencyMs"] = milliseconds(average)
    figures["averageLatencyMsValue"] = round(average, 1) if average is not None else None
    return figures


def insight_item(name: str, sums: CostSums) -> dict:
    return {"name": name, **_sums_figures(sums), "totalTokensTotal": sums.total_tokens}


class ModelInsightsView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Top 8 models (requested | upstream | mapping) with tokens and cost",
        parameters=[
            *_filter_parameters(USAGE_EQUALITY_FILTERS)[3:],
            query("source", "requested (default) | upstream | mapping"),
        ],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        source = request.query_params.get("source") or "requested"
        if source not in MODEL_SOURCES:
            raise ApiError(
                BodyCode.INVALID_MODEL_SOURCE, "source must be requested|upstream|mapping"
            )
        filters = fact_filters(request.query_params, columns=USAGE_EQUALITY_FILTERS)
        groups = insights_by_model(usage_records(filters), source=source)
        return ok([insight_item(name, sums) for name, sums in groups])


class EndpointInsightsView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Top 8 endpoints (inbound | upstream | path) with tokens and cost",
        parameters=[
            *_filter_parameters(USAGE_EQUALITY_FILTERS)[3:],
            query("source", "inbound (default) | upstream | path"),
        ],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        source = request.query_params.get("source") or "inbound"
        if source not in ENDPOINT_SOURCES:
            raise ApiError(BodyCode.INVALID_ENDPOINT_SOURCE, "source must be inbound|upstream|path")
        filters = fact_filters(request.query_params, columns=USAGE_EQUALITY_FILTERS)
        groups = insights_by_endpoint(usage_records(filters), source=source)
        return ok([insight_item(name, sums) for name, sums in groups])


def trend_item(day, sums: CostSums) -> dict:
    hit_rate = ratio_percent(sums.cached_tokens, sums.input_tokens + sums.cached_tokens)
    return {
        "date": day.isoformat(),
        **_sums_figures(sums),
        "cacheHitRate": percent(hit_rate),
        "cacheHitRateValue": hit_rate,
    }


TREND_DAYS = 60


class UsageTrendView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Per console day: tokens, cache hit rate, cost and latency (last 60 days)",
        parameters=_filter_parameters(USAGE_EQUALITY_FILTERS)[3:],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        filters = fact_filters(request.query_params, columns=USAGE_EQUALITY_FILTERS)
        if filters.start is None:
            filters = FactFilters(
                equal=filters.equal,
                search=filters.search,
                start=timezone.now() - timedelta(days=TREND_DAYS),
                end=filters.end,
            )
        return ok([trend_item(day, sums) for day, sums in daily_usage(usage_records(filters))])


class OpsErrorsView(AdminAPIView):
    @extend_schema(
        tags=["usage"],
        summary="Ops errors (failures), newest first",
        parameters=_filter_parameters(OPS_EQUALITY_FILTERS),
        responses={200: ANY_DATA},
    )
    def get(self, request):
        filters = fact_filters(request.query_params, columns=OPS_EQUALITY_FILTERS)
        return ok(
            paginate(
                ops_errors(filters),
                time_column="created_at",
                request=page_request(request.query_params),
                present=lambda rows: [ops_error_item(row) for row in rows],
            )
        )
