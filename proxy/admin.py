"""Django admin over the proxy's tables: an operators' console with secrets masked.

Writes go through ``proxy.services`` (never raw field edits of state the services own).
"""

from __future__ import annotations

import functools

from django.contrib import admin, messages
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from proxy import admin_keys  # noqa: F401 (the client keys' screen: importing registers it)
from proxy.admin_account_actions import AccountRowActionsMixin
from proxy.admin_account_forms import AccountAddForm, AccountForm
from proxy.admin_account_policy import burn_text
from proxy.admin_accounts_glance import AccountGlanceChangeList, AccountGlanceMixin
from proxy.admin_pages import AccountPagesMixin
from proxy.admin_settings import console as _settings_console  # noqa: F401 (registers it)
from proxy.daily_burn import daily_burns
from proxy.models import (
    Account,
    AccountCookie,
    AccountStatus,
    AccountUsage,
    AdminLoginEvent,
    AdminUser,
    Fingerprint,
    FingerprintUpdateHistory,
)
from proxy.services.account_tokens import (
    account_rotate_tokens,
    account_upsert_from_tokens,
)
from proxy.services.accounts import (
    account_delete,
    account_update_by_admin,
)
from telemetry.admin_helpers import ReadOnlyAdmin, masked

# One operator, who may do everything (proxy.models_admin.AdminUser): auth's groups mean nothing
# here (django.contrib.auth's admin, loaded first, registered them).
if admin.site.is_registered(Group):
    admin.site.unregister(Group)


@admin.register(AdminUser)
class AdminUserAdmin(ReadOnlyAdmin):
    """The password is changed on the console's "Change password" page or with
    `manage.py set_admin_password`, never by editing this row."""

    list_display = ("id", "created_at", "updated_at", "last_login")
    fields = ("id", "created_at", "updated_at", "last_login")


@admin.register(Account)
class AccountAdmin(AccountGlanceMixin, AccountRowActionsMixin, AccountPagesMixin, admin.ModelAdmin):
    form = AccountForm
    change_list_template = "admin/proxy/account_change_list.html"
    # At a glance (proxy.admin_accounts_glance), readable at 1366 px.
    list_display = (
        "glance_account",
        "glance_status",
        "glance_five_hour",
        "glance_weekly",
        "glance_today",
        "glance_last_used",
        "glance_actions",
    )
    list_display_links = None  # the account's name links to its page

    class Media:
        css = {"all": ("proxy/console_lists.css",)}

    actions = ("refresh_tokens_now", "enable_accounts", "disable_accounts")
    list_filter = ("status", "plan_type", "quota_limit_reached", "quota_verify_required")
    search_fields = ("=id", "email", "label", "=chatgpt_account_id", "=chatgpt_user_id")
    ordering = ("-added_at", "-id")
    readonly_fields = (
        "burned_today",  # next to the cap field
        "glance_status",  # what the list shows of it, first
        "glance_quota",
        "id",
        "email",
        "chatgpt_account_id",
        "chatgpt_user_id",
        "plan_type",
        "masked_access_token",
        "masked_refresh_token",
        "access_token_expires_at",
        "next_refresh_at",
        "quota_fetched_at",
        "quota_limit_reached",
        "quota_verify_required",
        "quota_cooldown_until",
        "cloudflare_cooldown_until",
        "added_at",
        "updated_at",
    )

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("access_token", "refresh_token", "label")
        return (
            "label",
            "status",
            "new_access_token",
            "new_refresh_token",
            "daily_burn_cap_tokens",
            *self.readonly_fields,
        )

    def get_changelist(self, request, **kwargs):
        return AccountGlanceChangeList

    @admin.display(description="burned today (UTC) / cap")
    def burned_today(self, obj: Account) -> str:
        burn = getattr(obj, "daily_burn", None)  # the list reads a page's at once
        if burn is None:
            burn = daily_burns([obj.pk], now=timezone.now()).get(obj.pk)
        return burn_text(burn)

    @admin.action(description="Refresh tokens now")
    def refresh_tokens_now(self, request, queryset) -> None:
        """Queue a refresh of each selected account that has a refresh token (it runs in the
        worker under the account's lease; the list shows "refreshing" meanwhile)."""
        from proxy.tasks import refresh_account_token_task

        eligible = list(
            queryset.exclude(refresh_token=None)
            .exclude(status__in=(AccountStatus.DISABLED, AccountStatus.BANNED))
            .values_list("pk", flat=True)
        )
        skipped = queryset.count() - len(eligible)
        for account_id in eligible:
            transaction.on_commit(
                functools.partial(refresh_account_token_task.delay, account_id, force=True)
            )
        text = f"Token refresh queued for {len(eligible)} account(s)."
        if skipped:
            text += f" {skipped} skipped (no refresh token, disabled or banned)."
        self.message_user(request, text, messages.INFO)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = AccountAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    @admin.display(description="access token")
    def masked_access_token(self, obj: Account) -> str:
        return masked(obj.access_token)

    @admin.display(description="refresh token")
    def masked_refresh_token(self, obj: Account) -> str:
        return masked(obj.refresh_token)

    def delete_model(self, request, obj) -> None:
        account_delete(account=obj)

    def delete_queryset(self, request, queryset) -> None:
        for account in queryset:
            account_delete(account=account)

    def save_model(self, request, obj, form, change) -> None:
        now = timezone.now()
        if not change:
            account, created = account_upsert_from_tokens(
                resolved=form.resolved, label=form.cleaned_data.get("label"), now=now
            )
            obj.pk = account.pk
            if not created:
                self.message_user(
                    request,
                    f"This ChatGPT identity was already in the pool: account {account.pk} got "
                    "the new tokens (its counters and cookies are kept).",
                    messages.WARNING,
                )
            return
        if form.resolved is not None:
            account_rotate_tokens(account=obj, resolved=form.resolved, now=now)
            self.message_user(request, "The account's tokens were replaced.", messages.INFO)
        account_update_by_admin(
            account=obj,
            label=form.cleaned_data.get("label") or None,
            status=form.chosen_status(),
            now=timezone.now(),
        )
        form.save_daily_burn_cap(obj)


@admin.register(AccountUsage)
class AccountUsageAdmin(ReadOnlyAdmin):
    list_display = (
        "account",
        "request_count",
        "empty_response_count",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "window_request_count",
        "window_reset_at",
        "last_used_at",
    )
    list_select_related = ("account",)
    search_fields = ("=account__id", "account__email", "account__label")
    ordering = ("-total_tokens",)


@admin.register(AccountCookie)
class AccountCookieAdmin(ReadOnlyAdmin):
    list_display = (
        "account_id",
        "domain",
        "name",
        "path",
        "masked_value",
        "expires_at",
        "updated_at",
    )
    list_filter = ("domain", "name")
    search_fields = ("=account__id",)
    fields = ("account", "domain", "name", "path", "masked_value", "expires_at", "updated_at")

    @admin.display(description="value")
    def masked_value(self, obj: AccountCookie) -> str:
        return masked(obj.value)


@admin.register(Fingerprint)
class FingerprintAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "originator",
        "app_version",
        "build_number",
        "platform",
        "arch",
        "source",
        "updated_at",
    )


@admin.register(FingerprintUpdateHistory)
class FingerprintUpdateHistoryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "app_version", "build_number", "chromium_version", "source")
    list_filter = ("source",)
    ordering = ("-created_at", "-id")


@admin.register(AdminLoginEvent)
class AdminLoginEventAdmin(ReadOnlyAdmin):
    """The log-in audit: every password check of both admin surfaces, and each lock-out."""

    list_display = ("created_at", "outcome", "reason", "locked_out", "client_ip", "surface")
    list_filter = ("outcome", "locked_out", "surface")
    search_fields = ("=client_ip",)
    search_help_text = "A client IP (exact)."
    ordering = ("-created_at", "-id")


# The request lists with names, filters and formatted pages replace the ledger's own (which
# cannot name accounts or keys): registered on import.
from proxy import admin_requests  # noqa: E402, F401
