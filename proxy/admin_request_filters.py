"""The filters of the request lists (usage records and ops errors, issue 38 item 4): by time, key,
account, model, route and status.

None of them reads the fact tables to draw itself (``telemetry.admin_filters``' rule: no
``SELECT DISTINCT`` over millions of rows): keys and accounts are listed from their own small
tables by name, models from the last 7 days of ``request_time_buckets``, routes from the
``/v1`` route table. Each filters on a column a seed index covers together with ``created_at``;
a value the sidebar does not list (a deleted account, an old model) still filters when it is
put in the URL by hand. Times are entered and shown in the console's time zone.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import Count, QuerySet
from django.utils import timezone

from proxy.models import Account, ClientApiKey
from proxy.v1.routes import POST_ROUTES
from telemetry.models import RequestTimeBucket

NO_KEY = "none"  # the key filter's value for rows without a key (admin and internal calls)
MODEL_CHOICE_DAYS = 7
MOST_MODEL_CHOICES = 40


class TimeRangeFilter(admin.SimpleListFilter):
    """``created``: the last hour, 24 hours, today, 7 or 30 days; or ``created_from`` /
    ``created_to`` (``YYYY-MM-DDTHH:MM`` in the console's time zone) from the sidebar's form."""

    title = "time"
    parameter_name = "created"
    template = "admin/proxy/time_range_filter.html"
    RANGE_PARAMETERS = ("created_from", "created_to")
    PRESETS = {
        "1h": ("last hour", timedelta(hours=1)),
        "24h": ("last 24 hours", timedelta(hours=24)),
        "today": ("today", None),
        "7d": ("last 7 days", timedelta(days=7)),
        "30d": ("last 30 days", timedelta(days=30)),
    }

    def __init__(self, request, params, model, model_admin) -> None:
        super().__init__(request, params, model, model_admin)
        for name in self.RANGE_PARAMETERS:
            if name in params:
                self.used_parameters[name] = params.pop(name)[-1]
        self.kept_parameters: list[tuple[str, str]] = []

    def lookups(self, request, model_admin):
        return [(value, label) for value, (label, _) in self.PRESETS.items()]

    def expected_parameters(self) -> list[str | None]:
        return [self.parameter_name, *self.RANGE_PARAMETERS]

    def _moment(self, name: str) -> datetime | None:
        text = (self.used_parameters.get(name) or "").strip()
        if not text:
            return None
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise IncorrectLookupParameters(f"{name} is not a date and time") from None
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment, timezone.get_current_timezone())
        return moment

    def bounds(self, *, now: datetime) -> tuple[datetime | None, datetime | None]:
        """The (start, end) the list is restricted to; either may be open."""
        preset = self.PRESETS.get(self.value() or "")
        if preset is not None:
            label, length = preset
            if length is None:
                local = timezone.localtime(now)
                return local.replace(hour=0, minute=0, second=0, microsecond=0), None
            return now - length, None
        return self._moment("created_from"), self._moment("created_to")

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        start, end = self.bounds(now=timezone.now())
        if start is not None:
            queryset = queryset.filter(created_at__gte=start)
        if end is not None:
            queryset = queryset.filter(created_at__lt=end)
        return queryset

    def choices(self, changelist):
        expected = set(self.expected_parameters())
        self.kept_parameters = [
            (name, value)
            for name, values in changelist.filter_params.items()
            if name not in expected
            for value in values
        ]
        yield from super().choices(changelist)

    def range_value(self, name: str) -> str:
        """The form's value for ``created_from`` / ``created_to``."""
        return self.used_parameters.get(name) or ""

    @property
    def from_value(self) -> str:
        return self.range_value("created_from")

    @property
    def to_value(self) -> str:
        return self.range_value("created_to")


class _ColumnFilter(admin.SimpleListFilter):
    """Equality on ``column``, any value from the URL."""

    column = ""

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


class KeyFilter(_ColumnFilter):
    title = "client key"
    parameter_name = "key"
    column = "client_api_key_id"

    def lookups(self, request, model_admin):
        keys = ClientApiKey.objects.order_by("name", "created_at").values_list("id", "name")
        return [*keys, (NO_KEY, "(no key)")]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        if self.value() == NO_KEY:
            return queryset.filter(client_api_key_id__isnull=True)
        return super().queryset(request, queryset)


class AccountFilter(_ColumnFilter):
    title = "account"
    parameter_name = "account"
    column = "account_id"

    def lookups(self, request, model_admin):
        rows = Account.objects.order_by("label", "email", "id").values_list("id", "label", "email")
        return [(pk, label or email or pk) for pk, label, email in rows]


class ModelFilter(_ColumnFilter):
    title = "model"
    parameter_name = "model"
    column = "model"

    def lookups(self, request, model_admin):
        since = timezone.now() - timedelta(days=MODEL_CHOICE_DAYS)
        # Grouped, not DISTINCT: the same answer; the buckets' primary key starts with
        # bucket_start, so only the last week of the rollup is read.
        models = (
            RequestTimeBucket.objects.filter(bucket_start__gte=since)
            .values("model")
            .annotate(rows=Count("model"))
            .order_by("model")
            .values_list("model", flat=True)[:MOST_MODEL_CHOICES]
        )
        return [(model, model) for model in models if model != "__unknown__"]


class RouteFilter(_ColumnFilter):
    title = "route"
    parameter_name = "route"
    column = "route"

    def lookups(self, request, model_admin):
        return [(route, route) for route, _, _ in POST_ROUTES]


class UsageStatusFilter(admin.SimpleListFilter):
    """A usage record is a success by the seed's CHECK (200–399); failures are ops errors."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("200", "200"), ("other", "other 2xx / 3xx")]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        if self.value() == "200":
            return queryset.filter(status_code=200)
        if self.value() == "other":
            return queryset.exclude(status_code=200)
        return queryset


class ErrorStatusFilter(admin.SimpleListFilter):
    """``status_class``: 4xx, 5xx (ranges on idx_ops_error_logs_status_created) or one code."""

    title = "status"
    parameter_name = "status_class"
    CODES = (400, 401, 402, 403, 404, 429, 499, 500, 502, 503, 504)

    def lookups(self, request, model_admin):
        return [("4xx", "4xx"), ("5xx", "5xx"), *((str(code), str(code)) for code in self.CODES)]

    def queryset(self, request, queryset: QuerySet) -> QuerySet:
        value = self.value() or ""
        if value in ("4xx", "5xx"):
            lowest = int(value[0]) * 100
            return queryset.filter(status_code__gte=lowest, status_code__lte=lowest + 99)
        if len(value) == 3 and value.isascii() and value.isdigit():
            return queryset.filter(status_code=int(value))
        return queryset
