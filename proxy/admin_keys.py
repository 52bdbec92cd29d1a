"""The console's client keys (issue 38 item 3): each key with its spend — requests and cost
today and this month — its budgets and limits as bars, and when it was last used. A key added
here is enabled unless the operator unticks the box. The full key is shown only on its own
pages (its change page and "use"); the list shows the prefix.

The list reads the page's totals in two queries (``telemetry.queries.key_totals``) and the live
counters of the keys with a policy in one Redis pipeline each. Periods are the budgets' own: the
UTC day and month (``proxy.domain.key_policy``), whatever the console's time zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from proxy.admin_api.display import number, relative, usd
from proxy.admin_key_policy import KeyPolicyInline, save_policy_formset
from proxy.admin_pages import ClientKeyPagesMixin
from proxy.domain.key_policy import day_start, month_start
from proxy.models import ClientApiKey, ClientApiKeyPolicy
from proxy.policies.admission import periods_of
from proxy.policies.counters import LiveUsage, live_usage
from proxy.runtime_state import redis_client
from proxy.services.client_api_keys import client_api_key_create
from telemetry.queries.key_totals import KeyTotals, PeriodTotals, key_totals

# A bar turns amber from this share of its limit, red from the second.
WARN_SHARE, ALERT_SHARE = 0.7, 0.9


class ClientApiKeyForm(forms.ModelForm):
    # The column's default is the database's (db_default), which a form does not see: without
    # this the box would start unticked and every new key would be created disabled.
    enabled = forms.BooleanField(
        required=False,
        initial=True,
        help_text="A disabled key is refused at once (401 saying it is disabled).",
    )

    class Meta:
        model = ClientApiKey
        fields = ("name", "label", "enabled")
        # Text columns, but one line each (Django's default for them is a textarea).
        widgets = {
            "name": forms.TextInput(attrs={"size": 40}),
            "label": forms.TextInput(attrs={"size": 40}),
        }


@dataclass(frozen=True)
class Bar:
    """One limit and the key's use of it, for the list's bars."""

    name: str
    used: float
    limit: float
    shown: str  # e.g. "$0.80 of $1.00"


def key_bars(policy: ClientApiKeyPolicy | None, live: LiveUsage | None, totals: KeyTotals) -> list:
    """The bars of a key's limits that are set (none without a policy): the budgets against the
    spend of ``totals``, the per-minute limits and the concurrency against ``live``."""
    if policy is None:
        return []
    bars = []
    for name, spent, budget in (
        ("today", totals.day.cost_usd, policy.daily_budget_usd),
        ("this month", totals.month.cost_usd, policy.monthly_budget_usd),
    ):
        if budget is not None:
            bars.append(Bar(name, spent, float(budget), f"{usd(spent)} of {usd(float(budget))}"))
    if live is not None:
        for name, used, limit in (
            ("requests / min", live.requests_last_minute, policy.requests_per_minute),
            ("tokens / min", live.tokens_this_minute, policy.tokens_per_minute),
            ("in flight", live.in_flight, policy.max_concurrent_requests),
        ):
            if limit is not None:
                bars.append(Bar(name, used, limit, f"{number(used)} of {number(limit)}"))
    return bars


def bars_html(bars: list[Bar]) -> SafeString:
    """Each bar as a labelled ``<meter>`` (green, amber from 70 %, red from 90 % of its limit)."""
    return format_html_join(
        "",
        '<div class="key-bar" data-limit="{}"><span class="key-bar-name">{}</span> '
        '<meter min="0" max="{}" value="{}" low="{}" high="{}" optimum="0"></meter> '
        '<span class="key-bar-value">{}</span></div>',
        (
            (
                bar.name,
                bar.name,
                bar.limit,
                bar.used,
                bar.limit * WARN_SHARE,
                bar.limit * ALERT_SHARE,
                bar.shown,
            )
            for bar in bars
        ),
    )


def period_html(period: PeriodTotals) -> SafeString:
    """The cost on top, the requests (and failures) under it."""
    failed = f", {number(period.failed)} failed" if period.failed else ""
    return format_html(
        '<span class="key-period" data-requests="{}" data-cost="{}">'
        '<span class="key-cost">{}</span><br>{} requests{}</span>',
        period.requests,
        round(period.cost_usd, 6),
        usd(period.cost_usd),
        number(period.requests),
        failed,
    )


class KeyChangeList(ChangeList):
    """Reads the page's totals (two queries) and its keys' live counters (a pipeline per key
    with a policy) once for the page."""

    def get_results(self, request) -> None:
        super().get_results(request)
        now = timezone.now()
        keys = list(self.result_list)
        totals = key_totals(
            [key.pk for key in keys],
            day_start=day_start(now),
            month_start=month_start(now),
            now=now,
        )
        redis = redis_client() if any(_policy(key) for key in keys) else None
        at_ms = int(now.timestamp() * 1000)
        for key in keys:
            key.console_totals = totals[key.pk]
            policy = _policy(key)
            key.console_live = (
                live_usage(redis, key.pk, periods_of(now), at_ms=at_ms)
                if policy is not None and redis is not None
                else None
            )


def _policy(key: ClientApiKey) -> ClientApiKeyPolicy | None:
    return getattr(key, "policy", None)


def _totals(key: ClientApiKey) -> KeyTotals:
    """What ``KeyChangeList`` read for ``key`` (the list's columns only appear there)."""
    totals: KeyTotals | None = getattr(key, "console_totals", None)
    return totals if totals is not None else KeyTotals(day=PeriodTotals(), month=PeriodTotals())


@admin.register(ClientApiKey)
class ClientApiKeyAdmin(ClientKeyPagesMixin, admin.ModelAdmin):
    """The full key is shown only on its own pages; lists show the prefix."""

    form = ClientApiKeyForm
    # Readable at 1366 px beside the filter: the key's prefix and label under its name, the
    # creation time on the key's page.
    list_display = (
        "name_and_label",
        "enabled",
        "today",
        "this_month",
        "limits",
        "last_used",
        "use_link",
    )
    list_filter = ("enabled",)
    list_select_related = ("policy",)
    search_fields = ("name", "label", "prefix", "=id")
    ordering = ("-created_at", "-id")
    readonly_fields = ("id", "key", "prefix", "created_at", "last_used_at")

    class Media:
        css = {"all": ("proxy/keys.css",)}

    def get_changelist(self, request, **kwargs):
        return KeyChangeList

    def get_inlines(self, request, obj=None):
        return [KeyPolicyInline] if obj is not None else []

    def save_formset(self, request, form, formset, change) -> None:
        if formset.model is ClientApiKeyPolicy:
            save_policy_formset(formset, form.instance)
            return
        super().save_formset(request, form, formset, change)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("name", "label", "enabled")
        return ("id", "name", "label", "enabled", "key", "prefix", "created_at", "last_used_at")

    @admin.display(description="name · key", ordering="name")
    def name_and_label(self, obj: ClientApiKey) -> SafeString:
        label = format_html(' · <span class="quiet">{}</span>', obj.label) if obj.label else ""
        return format_html(
            '<span class="key-name">{}</span><br><code class="key-prefix">{}</code>{}',
            obj.name,
            self.masked_key(obj),
            label,
        )

    @admin.display(description="key")
    def masked_key(self, obj: ClientApiKey) -> str:
        return f"{obj.prefix}…"

    @admin.display(description="today (UTC)")
    def today(self, obj: ClientApiKey) -> SafeString:
        return period_html(_totals(obj).day)

    @admin.display(description="month (UTC)")
    def this_month(self, obj: ClientApiKey) -> SafeString:
        return period_html(_totals(obj).month)

    @admin.display(description="budgets and limits")
    def limits(self, obj: ClientApiKey) -> SafeString:
        bars = key_bars(_policy(obj), getattr(obj, "console_live", None), _totals(obj))
        if not bars:
            return format_html('<span class="key-unlimited">{}</span>', "unlimited")
        return bars_html(bars)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, obj: ClientApiKey) -> SafeString:
        return _moment(obj.last_used_at)

    def save_model(self, request, obj, form, change) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created = client_api_key_create(
            name=form.cleaned_data["name"],
            label=form.cleaned_data.get("label"),
            enabled=form.cleaned_data["enabled"],
            now=timezone.now(),
        )
        obj.pk = created.pk
        state = "enabled" if created.enabled else "disabled"
        use = reverse("admin:proxy_clientapikey_use", args=[created.pk])
        messages.info(
            request,
            format_html(
                'Key "{}" created ({}). <a href="{}">Copy it and its client configuration</a>.',
                created.name,
                state,
                use,
            ),
        )


def _moment(moment: datetime | None) -> SafeString:
    """``5 minutes ago``, with the exact time in the console's zone as its title."""
    if moment is None:
        return format_html("{}", "never")
    exact = timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")
    return format_html('<span title="{}">{}</span>', exact, relative(moment, now=timezone.now()))
