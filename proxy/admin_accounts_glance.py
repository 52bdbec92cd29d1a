"""The accounts list at a glance (issue 38 item 2): per account its name and plan, its status
with the reason and the scheduler's eligibility verdict in words, the 5-hour and weekly quota
bars with their reset times, today's tokens against its daily burn cap, when it last served,
and the buttons of what an operator does to it (``proxy.admin_account_actions``).

Everything is read for the whole page at once (``AccountGlanceChangeList``): the usage rows,
today's burns, the newest failures and the refresh leases — a fixed number of queries and one
Redis MGET whatever the page's size. Quota bars are drawn from the stored snapshot
(``accounts.quota_json``), which the scheduled read (``proxy.read_active_quotas``), the
recovery pass, passive syncs and "read quota" keep current. Times are in the console's time
zone (Django's current one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from proxy.admin_api.display import relative
from proxy.admin_api.eligibility import eligibility_verdict
from proxy.admin_api.quota_windows import HIGH_USAGE_PERCENT, QuotaWindow, quota_windows
from proxy.daily_burn import DailyBurn, daily_burns
from proxy.models import Account, AccountStatus, AccountUsage
from proxy.runtime_state.refresh_leases import refresh_leases_held
from telemetry.queries.usage import latest_error_by_account

# The core snapshot's windows the list draws (``proxy.admin_api.quota_windows`` keys).
FIVE_HOUR_KEY = "codex-five-hour"
WEEKLY_KEY = "codex-weekly"


@dataclass(frozen=True)
class AccountGlance:
    """What the list shows of one account beyond its own columns."""

    windows: dict[str, QuotaWindow]
    burn: DailyBurn
    refreshing: bool
    last_used_at: datetime | None
    verdict: dict[str, Any]


def local_time(moment: datetime | None, *, now: datetime | None = None) -> str:
    """``14:05`` today, ``06-03 09:00`` another day of this year, else ``2025-12-31 09:00``
    (the console's time zone); ``—`` for none."""
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    today = timezone.localtime(now or timezone.now())
    if local.date() == today.date():
        return local.strftime("%H:%M")
    if local.year == today.year:
        return local.strftime("%m-%d %H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def full_time(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def account_glances(accounts: list[Account], *, now: datetime) -> dict[str, AccountGlance]:
    """The glance of each of ``accounts`` (one page): four queries and one Redis MGET."""
    ids = [account.pk for account in accounts]
    last_used = dict(
        AccountUsage.objects.filter(account_id__in=ids).values_list("account_id", "last_used_at")
    )
    burns = daily_burns(ids, now=now)
    held = refresh_leases_held(ids)
    last_errors = latest_error_by_account(ids)
    glances = {}
    for account in accounts:
        windows = quota_windows(account.quota_json)
        glances[account.pk] = AccountGlance(
            windows={window.key: window for window in windows},
            burn=burns[account.pk],
            refreshing=account.pk in held,
            last_used_at=last_used.get(account.pk),
            verdict=eligibility_verdict(
                account,
                windows=windows,
                refreshing=account.pk in held,
                last_error=last_errors.get(account.pk),
                daily_burn=burns[account.pk],
                now=now,
            ),
        )
    return glances


class AccountGlanceChangeList(ChangeList):
    """Reads the glance of the page's accounts once; each row carries ``glance`` (and the
    ``refresh_lease_held`` / ``daily_burn`` the account page's own fields read)."""

    def get_results(self, request) -> None:
        super().get_results(request)
        accounts = list(self.result_list)
        glances = account_glances(accounts, now=timezone.now())
        for account in accounts:
            glance = glances[account.pk]
            account.glance = glance
            account.refresh_lease_held = glance.refreshing
            account.daily_burn = glance.burn


def _glance(account: Account) -> AccountGlance:
    glance = getattr(account, "glance", None)
    if glance is None:  # a row drawn outside the list (never in practice): read on its own
        glance = account_glances([account], now=timezone.now())[account.pk]
    return glance


def _until_text(until: str | None, *, now: datetime) -> str:
    if not until:
        return ""
    return f" until {local_time(datetime.fromisoformat(until), now=now)}"


def _burn_figure(burn: DailyBurn) -> str:
    """``1,200 / 5,000 tokens`` (``· capped until 00:00 UTC`` over the cap), or
    ``1,200 (no cap)``."""
    if burn.cap_tokens is None:
        return f"{burn.burned_tokens:,} (no cap)"
    text = f"{burn.burned_tokens:,} / {burn.cap_tokens:,} tokens"
    return text + (" · capped until 00:00 UTC" if burn.over_cap else "")


def _token_refresh_text(account: Account, *, refreshing: bool) -> str:
    """The token refresh's display state (spec §4.2): running, when the next is due, or why
    there is none."""
    if refreshing:
        return "token refresh running"
    if not account.refresh_token:
        return "no refresh token"
    if account.next_refresh_at is None:
        return "token refresh not scheduled"
    return f"next token refresh {timezone.localtime(account.next_refresh_at):%Y-%m-%d %H:%M}"


def quota_bar(window: QuotaWindow | None, *, fetched: bool, now: datetime) -> SafeString:
    """A ``<meter>`` of the window's use with ``42% · resets 16:20`` under it."""
    if window is None:
        return format_html(
            '<span class="glance-quiet">{}</span>', "no such window" if fetched else "not read yet"
        )
    used = window.used_percent
    reset = f" · resets {local_time(window.reset_at, now=now)}" if window.reset_at else ""
    title = (
        f"{window.label}: {used:.0f}% used; resets {full_time(window.reset_at)} "
        f"({relative(window.reset_at, now=now)})"
        if window.reset_at
        else f"{window.label}: {used:.0f}% used; reset time not known"
    )
    return format_html(
        '<div class="glance-quota{}" title="{}" data-used="{}">'
        '<meter min="0" max="100" low="{}" high="99.9" optimum="0" value="{}"></meter>'
        '<span class="glance-figure">{}%{}</span></div>',
        " glance-full" if window.limit_reached else "",
        title,
        f"{used:g}",
        f"{HIGH_USAGE_PERCENT:g}",
        f"{used:g}",
        f"{used:.0f}",
        reset,
    )


def _change_url(account: Account) -> str:
    return reverse("admin:proxy_account_change", args=[quote(account.pk)])


if TYPE_CHECKING:
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class AccountGlanceMixin(_ModelAdminMixin):
    """The list's columns (``list_display`` names ``glance_*``)."""

    @admin.display(description="account", ordering="email")
    def glance_account(self, obj: Account) -> SafeString:
        name = obj.label or obj.email or obj.pk
        second = obj.email if obj.label and obj.email else None
        return format_html(
            '<a class="glance-name" href="{}">{}</a>{}<div class="glance-plan">{}</div>',
            _change_url(obj),
            name,
            format_html('<div class="glance-quiet">{}</div>', second) if second else "",
            obj.plan_type or "plan not known",
        )

    @admin.display(description="status · eligibility", ordering="status")
    def glance_status(self, obj: Account) -> SafeString:
        now = timezone.now()
        glance = _glance(obj)
        verdict = glance.verdict
        shown = "refreshing" if glance.refreshing else obj.status
        # The badge says the status: its check's detail without the "status is …: " part.
        reasons = [
            check["detail"].removeprefix(f"status is {obj.status}: ")
            for check in verdict["checks"]
            if not check["passed"] and check["name"] in ("status", "accessToken")
        ]
        failure = verdict["lastFailure"]
        lines = [(reason,) for reason in reasons]
        if failure is not None:
            at = datetime.fromisoformat(failure["at"])
            what = " ".join(
                str(part) for part in (failure["statusCode"], failure["failureClass"]) if part
            )
            lines.append((f"last failure {local_time(at, now=now)}: {what or failure['message']}",))
        lines.append((_token_refresh_text(obj, refreshing=glance.refreshing),))
        return format_html(
            '<span class="glance-status glance-status-{}">{}</span>'
            '<div class="glance-verdict glance-{}">{}{}</div>{}',
            shown,
            shown.replace("_", " "),
            "eligible" if verdict["eligible"] else "held",
            verdict["summary"],
            _until_text(verdict["until"], now=now),
            format_html_join("", '<div class="glance-quiet">{}</div>', lines),
        )

    @admin.display(description="5-hour quota")
    def glance_five_hour(self, obj: Account) -> SafeString:
        window = _glance(obj).windows.get(FIVE_HOUR_KEY)
        return quota_bar(window, fetched=obj.quota_fetched_at is not None, now=timezone.now())

    @admin.display(description="weekly quota")
    def glance_weekly(self, obj: Account) -> SafeString:
        window = _glance(obj).windows.get(WEEKLY_KEY)
        return quota_bar(window, fetched=obj.quota_fetched_at is not None, now=timezone.now())

    @admin.display(description="quota")
    def glance_quota(self, obj: Account) -> SafeString:
        """Every window of the stored snapshot (the account's page), with its reset."""
        now = timezone.now()
        windows = list(_glance(obj).windows.values())
        if not windows:
            text = "not read yet" if obj.quota_fetched_at is None else "no window in the snapshot"
            return format_html('<span class="glance-quiet">{}</span>', text)
        return format_html_join(
            "",
            '<div class="glance-window"><strong>{}</strong> {}</div>',
            ((window.label, quota_bar(window, fetched=True, now=now)) for window in windows),
        )

    @admin.display(description="tokens today (UTC) / cap")
    def glance_today(self, obj: Account) -> SafeString:
        burn = _glance(obj).burn
        meter = (
            format_html(
                '<meter min="0" max="{}" low="{}" high="{}" optimum="0" value="{}"></meter>',
                burn.cap_tokens,
                burn.cap_tokens * 0.8,
                burn.cap_tokens * 0.999,
                min(burn.burned_tokens, burn.cap_tokens),
            )
            if burn.cap_tokens
            else ""
        )
        return format_html(
            '<div class="glance-today">{}<span class="glance-figure">{}</span></div>',
            meter,
            _burn_figure(burn),
        )

    @admin.display(description="last used")
    def glance_last_used(self, obj: Account) -> SafeString:
        used = _glance(obj).last_used_at
        if used is None:
            return format_html('<span class="glance-quiet">{}</span>', "never")
        return format_html(
            '<span title="{}">{}</span>', full_time(used), relative(used, now=timezone.now())
        )

    @admin.display(description="actions")
    def glance_actions(self, obj: Account) -> SafeString:
        """The test page's link and a button per action, each posting the list's one hidden
        action form (``templates/admin/proxy/account_change_list.html``): HTML has no forms
        inside the list's own form."""
        buttons = [("read-quota", "read quota")]
        if obj.refresh_token and obj.status not in (AccountStatus.DISABLED, AccountStatus.BANNED):
            buttons.append(("refresh-token", "refresh token"))
        if obj.status == AccountStatus.DISABLED:
            buttons.append(("enable", "enable"))
        else:
            buttons.append(("disable", "disable"))
        return format_html(
            '<div class="glance-actions"><a href="{}">test</a>{}</div>',
            reverse("admin:proxy_account_test", args=[obj.pk]),
            format_html_join(
                "",
                '<button type="submit" form="account-row-action" formaction="{}" '
                'data-action="{}" class="glance-button">{}</button>',
                (
                    (
                        reverse("admin:proxy_account_row_action", args=[quote(obj.pk), action]),
                        action,
                        label,
                    )
                    for action, label in buttons
                ),
            ),
        )
