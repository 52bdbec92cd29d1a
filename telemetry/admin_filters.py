"""Sidebar filters of the fact tables with fixed choices.

Django's default field filter lists its choices with ``SELECT DISTINCT`` over the whole table on
every page view: a full scan of millions of rows (``usage_records.transport`` has no index on
purpose, seed 004 §4.7). These filters offer the values the code writes (codex-proxy spec §7.1)
and query nothing to draw themselves. A value outside the list still filters when it is put in
the URL by hand (``?failure_class=new_class``): the failure taxonomy is open (seed §4.8).
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet

# How the upstream was called (spec §7.1).
TRANSPORTS = (
    ("http_sse", "HTTP SSE"),
    ("websocket", "WebSocket"),
    ("http", "HTTP"),
)
# The spec's failure classes (§7.1), plus client_cancelled: a stream the client abandoned (the
# docs/departures.md).
FAILURE_CLASSES = (
    "no_available_accounts",
    "quota_exhausted",
    "rate_limited",
    "expired",
    "disabled",
    "banned",
    "cloudflare_challenge",
    "cloudflare_path_blocked",
    "model_unsupported",
    "upstream_unavailable",
    "continuation_busy",
    "history_unavailable",
    "upstream",
    "invalid_sse",
    "missing_completed",
    "empty_upstream_response",
    "response_failed",
    "client_cancelled",
)
# Failures end in 4xx or 5xx; as ranges, the filter can use idx_ops_error_logs_status_created.
STATUS_CLASSES = {
    "4xx": (400, 499),
    "5xx": (500, 599),
}


class TransportFilter(admin.SimpleListFilter):
    title = "transport"
    parameter_name = "transport"

    def lookups(self, request, model_admin):
        return TRANSPORTS

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(transport=value) if value else queryset


class FailureClassFilter(admin.SimpleListFilter):
    title = "failure class"
    parameter_name = "failure_class"

    def lookups(self, request, model_admin):
        return [(name, name) for name in FAILURE_CLASSES]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(failure_class=value) if value else queryset


class StatusClassFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status_class"

    def lookups(self, request, model_admin):
        return [(name, name) for name in STATUS_CLASSES]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        bounds = STATUS_CLASSES.get(self.value() or "")
        if bounds is None:
            return queryset
        lowest, highest = bounds
        return queryset.filter(status_code__gte=lowest, status_code__lte=highest)
