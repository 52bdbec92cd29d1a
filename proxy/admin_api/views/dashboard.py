"""The dashboard (spec §6.7): summary and trend."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema

from proxy.admin_api.dashboard import TREND_KINDS, dashboard_summary, trend
from proxy.admin_api.envelope import bad_request, ok
from proxy.admin_api.runway import quota_runway
from proxy.admin_api.schema import ANY_DATA, query
from proxy.admin_api.views.base import AdminAPIView

KIND = query("kind", "usage (default) | latency | errors")


def _kind(request) -> str:
    kind = request.query_params.get("kind") or "usage"
    if kind not in TREND_KINDS:
        raise bad_request("kind must be usage|latency|errors")
    return kind


class DashboardSummaryView(AdminAPIView):
    @extend_schema(
        tags=["dashboard"],
        summary="Cards, hourly trend, health timeline, accounts, pool and capacity (today)",
        parameters=[KIND],
        responses={200: ANY_DATA},
    )
    def get(self, request):
        return ok(dashboard_summary(now=timezone.now(), kind=_kind(request)))


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
