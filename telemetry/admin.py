"""Django admin over the ledger: read-only facts and buckets."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q

from telemetry.admin_filters import FailureClassFilter, StatusClassFilter, TransportFilter
from telemetry.admin_helpers import EstimatedCountPaginator, ReadOnlyAdmin
from telemetry.models import OpsErrorLog, RequestTimeBucketListing, UsageRecord


class ExactIdOrMessageSearch:
    """Seed §4.7 search boundary: message ILIKE, or exact request/response id — never metadata."""

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return (
            queryset.filter(Q(request_id=term) | Q(response_id=term) | Q(message__icontains=term)),
            False,
        )


@admin.register(UsageRecord)
class UsageRecordAdmin(ExactIdOrMessageSearch, ReadOnlyAdmin):
    list_display = (
        "created_at",
        "route",
        "model",
        "account_id",
        "client_api_key_id",
        "status_code",
        "transport",
        "latency_ms",
        "first_token_ms",
        "input_tokens",
        "output_tokens",
    )
    # Fixed choices, never SELECT DISTINCT over the table (telemetry.admin_filters). No status
    # filter: a usage record is a success by CHECK (200–399), in practice always 200.
    list_filter = (TransportFilter,)
    search_fields = ("message",)
    search_help_text = "Exact request id or response id, or words of the message."
    ordering = ("-created_at", "-id")
    paginator = EstimatedCountPaginator
    show_full_result_count = False


@admin.register(OpsErrorLog)
class OpsErrorLogAdmin(ExactIdOrMessageSearch, ReadOnlyAdmin):
    list_display = (
        "created_at",
        "route",
        "failure_class",
        "status_code",
        "client_status_code",
        "upstream_status_code",
        "account_id",
        "model",
        "message",
    )
    list_filter = (FailureClassFilter, StatusClassFilter, TransportFilter)
    search_fields = ("message",)
    search_help_text = "Exact request id or response id, or words of the message."
    ordering = ("-created_at", "-id")
    paginator = EstimatedCountPaginator
    show_full_result_count = False


@admin.register(RequestTimeBucketListing)
class RequestTimeBucketAdmin(ReadOnlyAdmin):
    list_display = (
        "bucket_start",
        "provider",
        "account_id",
        "model",
        "service_tier",
        "request_count",
        "success_count",
        "error_count",
        "input_tokens",
        "output_tokens",
        "average_latency_ms",
        "max_latency_ms",
        "min_latency_ms",
    )
    list_display_links = None  # rows have no unique key the admin could open
    search_fields = ("=account_id", "=model")
    date_hierarchy = "bucket_start"
    paginator = EstimatedCountPaginator
    show_full_result_count = False

    @admin.display(description="requests")
    def request_count(self, obj: RequestTimeBucketListing) -> int:
        return obj.success_count + obj.error_count

    @admin.display(description="avg latency ms")
    def average_latency_ms(self, obj: RequestTimeBucketListing) -> int | None:
        return obj.latency_sum // obj.latency_count if obj.latency_count else None
