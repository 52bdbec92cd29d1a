"""What an operator does to one account from its row of the accounts list (issue 38 item 2):
read its quota now, refresh its tokens now, enable or disable it. Each is a POST (the admin's
CSRF check) to ``<account>/do/<action>/``, runs through the same service as the admin API's
route for it, says what happened in a message and returns to the list as it was (filters and
page kept). The connection test has its own page (``proxy.admin_pages``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from proxy.admin_accounts_glance import FIVE_HOUR_KEY, WEEKLY_KEY, local_time
from proxy.admin_api import pool
from proxy.admin_api.quota_windows import quota_windows
from proxy.models import Account, AccountStatus
from proxy.services.account_health import account_refresh_now
from proxy.services.accounts import account_update_by_admin

Outcome = tuple[int, str]  # (messages level, text)


def _name(account: Account) -> str:
    return account.label or account.email or account.pk


def read_quota(account: Account) -> Outcome:
    """Read the usage now and apply it as the quota jobs do."""
    now = timezone.now()
    upstream = pool.UpstreamAccount(
        id=account.pk,
        access_token=account.access_token,
        chatgpt_account_id=account.chatgpt_account_id,
        email=account.email,
        plan_type=account.plan_type,
    )
    try:
        reading = pool.usage_read_and_apply(upstream, now=now)
    except pool.UsageUnavailable as error:
        return messages.ERROR, f"The quota of {_name(account)} could not be read: {error}."
    windows = {window.key: window for window in quota_windows(reading.snapshot.quota)}
    parts = []
    for key, label in ((FIVE_HOUR_KEY, "5-hour"), (WEEKLY_KEY, "weekly")):
        window = windows.get(key)
        if window is not None:
            reset = f" (resets {local_time(window.reset_at, now=now)})" if window.reset_at else ""
            parts.append(f"{label} {window.used_percent:.0f}% used{reset}")
    found = ", ".join(parts) or "no 5-hour or weekly window"
    text = f"The quota of {_name(account)} was read: {found}"
    if reading.snapshot.limit_reached:
        until = reading.snapshot.reset_at
        text += "; a limit is reached" + (f" until {local_time(until, now=now)}" if until else "")
        return messages.WARNING, text + "."
    return messages.SUCCESS, text + "."


def refresh_token(account: Account) -> Outcome:
    """Refresh the tokens now (the account's lease, at most two attempts), waiting for it."""
    report = account_refresh_now(account=account)
    if report.result == "alive":
        return messages.SUCCESS, f"The tokens of {_name(account)} were refreshed."
    if report.result == "dead":
        return messages.ERROR, f"The token refresh of {_name(account)} failed: {report.error}."
    return messages.WARNING, f"The token refresh of {_name(account)} was skipped: {report.error}."


def enable(account: Account) -> Outcome:
    account = account_update_by_admin(
        account=account, label=account.label, status=AccountStatus.ACTIVE, now=timezone.now()
    )
    if account.status == AccountStatus.QUOTA_EXHAUSTED:
        return messages.WARNING, (
            f"{_name(account)} was enabled; its quota limit is reached, so it is stored as "
            "quota_exhausted until the quota check finds it lifted."
        )
    return messages.SUCCESS, f"{_name(account)} was enabled (active)."


def disable(account: Account) -> Outcome:
    account_update_by_admin(
        account=account, label=account.label, status=AccountStatus.DISABLED, now=timezone.now()
    )
    return messages.SUCCESS, f"{_name(account)} was disabled: it serves nothing until enabled."


ROW_ACTIONS: dict[str, Callable[[Account], Outcome]] = {
    "read-quota": read_quota,
    "refresh-token": refresh_token,
    "enable": enable,
    "disable": disable,
}

if TYPE_CHECKING:
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class AccountRowActionsMixin(_ModelAdminMixin):
    """Added to the Account admin: the row actions' URL."""

    def get_urls(self) -> list[URLPattern]:
        action = path(
            "<path:object_id>/do/<slug:action>/",
            self.admin_site.admin_view(self.row_action_view),
            name="proxy_account_row_action",
        )
        return [action, *super().get_urls()]

    def row_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        handler = ROW_ACTIONS.get(action)
        account = self.get_object(request, unquote(object_id))
        if handler is None or account is None:
            raise Http404("No such account or action")
        if not self.has_change_permission(request, account):
            raise PermissionDenied
        level, text = handler(account)
        self.message_user(request, text, level)
        return HttpResponseRedirect(_back(request))


def _back(request: HttpRequest) -> str:
    """The list as the operator left it (the form's ``back``: a path of the list), else the
    list."""
    listing = reverse("admin:proxy_account_changelist")
    back = request.POST.get("back") or ""
    if (
        back.startswith(listing)
        and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()})
        and "\n" not in back
    ):
        return back
    return listing
