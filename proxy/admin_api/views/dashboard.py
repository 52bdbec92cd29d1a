"""The dashboard (spec §6.7): summary and trend."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema

from proxy.admin_api.dashboard import TREND_KINDS, dashboard_summary, trend
from proxy.admin_api.dashboard_range import dashboard_range
from proxy.admin_api.envelope import ApiError, BodyCode, bad_request, ok
from proxy.admin_api.runway import quota_runway
from proxy.admin_api.schema import ANY_DATA, query
from proxy.admin_api.views.base import AdminAPIView
from telemetry.queries.usage_ranges import RANGE_NAMES, RangeError

KIND = query("kind", "usage (default) | latency | errors")
RANGE = [
    query("range", "The range of `range` (cards and points): today (default) | 7d | 30d | custom"),
    query("startDate", "custom: the first day (YYYY-MM-DD, CONSOLE_TIME_ZONE)"),
    query("endDate", "custom: the last day (YYYY-MM-DD, CONSOLE_TIME_ZONE), at most 366 days on"),
]


def _kind(request) -> str:
    kind = request.query_params.get("kind") or "usage"
    if kind not in TREND_KINDS:
        raise bad_request("kind must be usage|latency|errors")
    return kind


def _range(request, now):
    name = request.query_params.get("range") or "today"
    if name not in RANGE_NAMES:
        raise bad_request("range must be today|7d|30d|custom")
    try:
        return dashboard_range(
            name,
            now=now,
            first_day=request.query_params.get("startDate"),
            last_day=request.query_params.get("endDate"),
        )
    except RangeError as error:
        raise ApiError(BodyCode.INVALID_TIME_RANGE, str(error)) from None


class DashboardSummaryView(AdminAPIView):
    @extend_schema(
        tags=["dashboard"],
        summary="Cards, hourly trend, health timeline, accounts, pool and capacity (today); "
        "`range`: the cards and points of the chosen range",
        parameters=[KIND, *RANGE],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        now = timezone.now()
        kind, chosen = _kind(request), _range(request, now)
        return ok(dashboard_summary(now=now, kind=kind, chosen_range=chosen))


class DashboardTrendView(AdminAPIView):
    @extend_schema(
        tags=["dashboard"],
        summary="Today's hourly trend",
        parameters=[KIND],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        return ok(trend(now=timezone.now(), kind=_kind(request)))


class DashboardRunwayView(AdminAPIView):
    @extend_schema(
        tags=["dashboard"],
        summary="Quota runway: when each account and the pool use up their 5-hour and weekly "
        "windows at the last hour's burn rate",
        responses={200: ANY_DATA},
    )
    def get(self, request):
        return ok(quota_runway(now=timezone.now()))
