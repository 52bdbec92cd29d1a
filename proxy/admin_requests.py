"""The request lists of the console (issue 38 item 4): usage records and ops errors with names
(the account's label or e-mail, the key's name) instead of ``acct_…`` / ``key_…`` ids, the cost,
filters by time, key, account, model, route and status (``proxy.admin_request_filters``), and
each row's page formatted with the links between an error, its request, its account and its
key (``proxy.admin_request_detail``).

The ledger's own admin (``telemetry.admin``) cannot name accounts or keys: telemetry imports
nothing from the proxy. This module, on the proxy's side of that arrow, replaces its two
registrations with subclasses that can. Names are read for a page at once (one query per
table); a fact of a deleted account or key shows its id, marked deleted.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from proxy.admin_api.display import milliseconds, usd
from proxy.admin_request_detail import FactNames, detail_sections, local_moment, record_cost
from proxy.admin_request_filters import (
    AccountFilter,
    ErrorStatusFilter,
    KeyFilter,
    ModelFilter,
    RouteFilter,
    TimeRangeFilter,
    UsageStatusFilter,
)

# Importing telemetry.admin registers the ledger's own lists first (unregistered below).
from telemetry.admin import ExactIdOrMessageSearch
from telemetry.admin_filters import FailureClassFilter, TransportFilter
from telemetry.admin_helpers import EstimatedCountPaginator, ReadOnlyAdmin
from telemetry.models import OpsErrorLog, UsageRecord

NOTHING = "—"
# The proxy's own id shapes (request ids it generates, Responses API ids, the facts' ids).
ID_SHAPED = re.compile(r"(?:req|resp|usage|ops_error)_[A-Za-z0-9_.-]+")


class NamedFactChangeList(ChangeList):
    """Reads the names of the page's accounts and keys once; each row carries ``names``."""

    def get_results(self, request) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        names = FactNames.read(
            account_ids=(row.account_id for row in rows),
            key_ids=(row.client_api_key_id for row in rows),
        )
        for row in rows:
            row.names = names


def _names(row: UsageRecord | OpsErrorLog) -> FactNames:
    names = getattr(row, "names", None)
    if names is None:  # a row drawn outside the list: read on its own
        names = FactNames.read(account_ids=[row.account_id], key_ids=[row.client_api_key_id])
    return names


def _count(value: int | None) -> str:
    return NOTHING if value is None else f"{value:,}"


if TYPE_CHECKING:
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class FactConsoleMixin(_ModelAdminMixin):
    """What both request lists share: names, time links, filters' look, the detail page."""

    search_fields = ("message",)
    search_help_text = (
        "An id: exact request, response or upstream request id (a req_…, resp_…, usage_… or "
        "ops_error_… id only through the ids' indexes); or words of the message."
    )
    ordering = ("-created_at", "-id")
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count per choice would scan the facts
    list_display_links = None  # the time links to the row's page

    class Media:
        css = {"all": ("proxy/console_lists.css",)}

    def get_changelist(self, request, **kwargs):
        return NamedFactChangeList

    def get_search_results(self, request, queryset, search_term):
        """An id of the shapes the proxy gives is looked up through the ids' indexes alone:
        the message words are a scan of the whole table (seed §4.7's boundary either way)."""
        term = search_term.strip()
        if ID_SHAPED.fullmatch(term):
            return (
                queryset.filter(
                    Q(pk=term)
                    | Q(request_id=term)
                    | Q(response_id=term)
                    | Q(upstream_request_id=term)
                ),
                False,
            )
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="time", ordering="created_at")
    def time_link(self, obj) -> SafeString:
        url = reverse(
            f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[quote(obj.pk)]
        )
        return format_html('<a href="{}">{}</a>', url, local_moment(obj.created_at))

    @admin.display(description="client key")
    def key_name(self, obj) -> SafeString:
        return _names(obj).key(obj.client_api_key_id)

    @admin.display(description="account")
    def account_name(self, obj) -> SafeString:
        return _names(obj).account(obj.account_id)

    @admin.display(description="route")
    def route_cell(self, obj) -> SafeString:
        return format_html(
            '{}<div class="fact-quiet">{}</div>', obj.route or NOTHING, obj.transport or ""
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The row's page: formatted sections (``proxy.admin_request_detail``), no form."""
        fact = self.get_object(request, unquote(object_id))
        if fact is None:
            raise Http404(f"No {self.opts.verbose_name} with this id")
        if not self.has_view_permission(request, fact):
            raise PermissionDenied
        summary, sections = detail_sections(fact)
        context = {
            **self.admin_site.each_context(request),
            "title": summary,
            "subtitle": None,
            "opts": self.opts,
            "original": fact,
            "sections": sections,
            "has_view_permission": True,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/proxy/fact_detail.html", context)


admin.site.unregister(UsageRecord)
admin.site.unregister(OpsErrorLog)


# The filters both request lists open with: when, which key and account, what model and route.
_WHEN_WHO_WHAT = (TimeRangeFilter, KeyFilter, AccountFilter, ModelFilter, RouteFilter)


@admin.register(UsageRecord)
class UsageRecordConsoleAdmin(FactConsoleMixin, ExactIdOrMessageSearch, ReadOnlyAdmin):
    list_display = (
        "time_link",
        "route_cell",
        "model",
        "key_name",
        "account_name",
        "status_code",
        "tokens",
        "latency",
        "cost",
    )
    list_filter = (*_WHEN_WHO_WHAT, UsageStatusFilter, TransportFilter)

    @admin.display(description="tokens in · out · cached")
    def tokens(self, obj: UsageRecord) -> str:
        return (
            f"{_count(obj.input_tokens)} · {_count(obj.output_tokens)} · "
            f"{_count(obj.cached_tokens)}"
        )

    @admin.display(description="first token · total")
    def latency(self, obj: UsageRecord) -> str:
        return f"{milliseconds(obj.first_token_ms)} · {milliseconds(obj.latency_ms)}"

    @admin.display(description="cost")
    def cost(self, obj: UsageRecord) -> str:
        cost = record_cost(obj)
        return usd(cost.total if cost else None)


@admin.register(OpsErrorLog)
class OpsErrorLogConsoleAdmin(FactConsoleMixin, ExactIdOrMessageSearch, ReadOnlyAdmin):
    list_display = (
        "time_link",
        "route_cell",
        "model",
        "key_name",
        "account_name",
        "statuses",
        "failure_class",
        "short_message",
    )
    list_filter = (*_WHEN_WHO_WHAT, ErrorStatusFilter, FailureClassFilter, TransportFilter)

    @admin.display(description="status · client · upstream")
    def statuses(self, obj: OpsErrorLog) -> SafeString:
        return format_html(
            '<span class="fact-failed">{}</span> · {} · {}',
            obj.status_code or NOTHING,
            obj.client_status_code or NOTHING,
            obj.upstream_status_code or NOTHING,
        )

    @admin.display(description="message")
    def short_message(self, obj: OpsErrorLog) -> str:
        return obj.message if len(obj.message) <= 120 else obj.message[:119] + "…"
