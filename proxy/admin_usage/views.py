"""``/admin/usage/`` (the page) and ``/admin/usage/export.csv`` (its selection as CSV), behind
the admin's log-in like every console page (``OperatorsAdminSite.admin_view``)."""

from __future__ import annotations

import csv
from datetime import datetime

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone

from proxy.admin_usage.report import (
    BREAKDOWN_LABELS,
    CSV_COLUMNS,
    chart_data,
    csv_rows,
    group_names,
    source_notes,
    table_rows,
    totals,
)
from proxy.admin_usage.selection import FILTER_NAMES, Selection, selection_from
from proxy.models import Account, ClientApiKey
from proxy.v1.routes import POST_ROUTES
from telemetry.queries.usage_analytics import (
    STATUS_FAILED,
    STATUS_SUCCEEDED,
    UsageAnalysis,
    usage_analysis,
)
from telemetry.queries.usage_ranges import RANGE_LABELS

# As the dashboard's (``proxy.admin_site``, which imports this module): the page loads only its
# own files (the vendored Chart.js) and talks to nothing else.
USAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def _analysis(request: HttpRequest, now: datetime) -> tuple[Selection, UsageAnalysis]:
    selection = selection_from(request.GET, now=now, zone=timezone.get_current_timezone())
    analysis = usage_analysis(selection.usage_range, by=selection.by, filters=selection.filters)
    return selection, analysis


def _options(selection: Selection, analysis: UsageAnalysis, names: dict[str, str]) -> dict:
    """(value, label) choices of each filter: what the range holds, the pool's accounts and
    keys, the /v1 routes, and whatever is chosen now."""
    filters = selection.filters
    accounts = {
        account_id: label or email or account_id
        for account_id, label, email in Account.objects.values_list("id", "label", "email")
    }
    accounts.update({value: value for value in analysis.seen["account"] if value not in accounts})
    keys = {key_id: name for key_id, name in ClientApiKey.objects.values_list("id", "name")}
    routes = {route: route for route, _, _ in POST_ROUTES}
    statuses = {STATUS_SUCCEEDED: "succeeded", STATUS_FAILED: "failed"}
    models = {model: model for model in analysis.seen["model"]}
    chosen = {
        "model": models,
        "account": accounts,
        "key": keys,
        "route": routes,
        "status": statuses,
    }
    for group, name in names.items():
        chosen[analysis.by].setdefault(group, name)
    for filter_name, values in chosen.items():
        value = getattr(filters, filter_name)
        if value:
            values.setdefault(value, value)
    return {
        name: sorted(values.items(), key=lambda item: item[1].lower())
        for name, values in chosen.items()
    }


def usage_page(request: HttpRequest, *, site: admin.AdminSite) -> HttpResponse:
    now = timezone.now()
    selection, analysis = _analysis(request, now)
    names = group_names(analysis.by, analysis.groups)
    rows = table_rows(selection, analysis, names)
    usage_range = analysis.usage_range
    context = {
        **site.each_context(request),
        "title": "Usage analytics",
        "selection": selection,
        "analysis": analysis,
        "range_tabs": [
            (name, label, selection.query(range=name, start=None, end=None))
            for name, label in RANGE_LABELS.items()
            if name != "custom"
        ],
        "breakdowns": [
            (name, label, selection.query(by=name)) for name, label in BREAKDOWN_LABELS.items()
        ],
        "breakdown_label": BREAKDOWN_LABELS[analysis.by],
        "options": _options(selection, analysis, names),
        "zone_name": timezone.get_current_timezone_name(),
        "range_start": usage_range.start.astimezone(usage_range.zone),
        "range_end": usage_range.end.astimezone(usage_range.zone),
        "totals": totals(analysis),
        "rows": rows,
        "notes": source_notes(analysis, now=now),
        "chart_json": chart_data(analysis, rows),
        "csv_query": selection.query(),
        "clear_query": selection.query(model=None, account=None, key=None, route=None, status=None),
        "has_filters": any(getattr(selection.filters, name) for name in FILTER_NAMES),
    }
    response = TemplateResponse(request, "admin/proxy/usage_analytics.html", context)
    response["Content-Security-Policy"] = USAGE_CSP
    return response


def usage_csv(request: HttpRequest) -> HttpResponse:
    """The page's selection per period and group (``report.CSV_COLUMNS``): at most a row per
    day and group of a year, so written whole."""
    selection, analysis = _analysis(request, timezone.now())
    if selection.problems:
        # The page shows today's figures under a note; a file has no place for the note, so a
        # selection the page had to change is refused rather than exported as something else.
        return HttpResponseBadRequest(
            "\n".join(selection.problems) + "\n", content_type="text/plain; charset=utf-8"
        )
    names = group_names(analysis.by, analysis.groups)
    usage_range = analysis.usage_range
    filename = (
        f"usage-{usage_range.first_day.isoformat()}-{usage_range.last_day.isoformat()}"
        f"-by-{analysis.by}.csv"
    )
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_rows(analysis, names))
    return response


def usage_urls(site: admin.AdminSite) -> list[URLPattern]:
    """The two routes, for ``OperatorsAdminSite.get_urls``."""

    def page(request: HttpRequest) -> HttpResponse:
        return usage_page(request, site=site)

    return [
        path("usage/", site.admin_view(page), name="usage_analytics"),
        path("usage/export.csv", site.admin_view(usage_csv), name="usage_analytics_csv"),
    ]
