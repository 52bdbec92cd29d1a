"""The console's pages for account and key actions (issue 18): test a connection, import an
export file, enable / disable from the list; a key's ready-to-paste configuration with copy
buttons. Writes go through the same services as the admin API; the connection test page streams
the admin API's own SSE route."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from proxy.admin_api.key_config import client_config
from proxy.admin_site import DASHBOARD_CSP
from proxy.models import Account, AccountStatus, ClientApiKey
from proxy.models_catalog import DEFAULT_MODEL_ID
from proxy.services.account_import import ImportOutcome, ImportUnreadable, accounts_import
from proxy.services.accounts import account_update_by_admin

MOST_IMPORT_BYTES = 16 * 1024 * 1024


class AccountImportForm(forms.Form):
    file = forms.FileField(required=False, help_text="A CPR, Sub2API or CLIProxyAPI export (JSON)")
    text = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8}),
        help_text="…or paste it here (up to 1 MiB; a larger export: upload it as a file, up to "
        "16 MiB)",
    )

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean returns cleaned_data
        upload = cleaned.get("file")
        if upload is not None:
            if upload.size > MOST_IMPORT_BYTES:
                raise forms.ValidationError("The file is larger than 16 MiB.")
            raw = upload.read()
        else:
            raw = (cleaned.get("text") or "").encode()
        if not raw.strip():
            raise forms.ValidationError("Choose a file or paste an export.")
        try:
            cleaned["payload"] = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise forms.ValidationError("That is not JSON.") from None
        except RecursionError:
            raise forms.ValidationError("That JSON is nested too deep.") from None
        return cleaned


def _page(request, template: str, context: dict, admin_site) -> TemplateResponse:
    response = TemplateResponse(request, template, {**admin_site.each_context(request), **context})
    response["Content-Security-Policy"] = DASHBOARD_CSP
    return response


if TYPE_CHECKING:
    # A mixin of ModelAdmins: checked as one (at run time a plain class).
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


class AccountPagesMixin(_ModelAdminMixin):
    """Added to the Account admin: the import and connection test pages."""

    def get_urls(self) -> list[URLPattern]:
        pages = [
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="proxy_account_import",
            ),
            path(
                "<path:object_id>/test/",
                self.admin_site.admin_view(self.test_view),
                name="proxy_account_test",
            ),
        ]
        return [*pages, *super().get_urls()]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        report = None
        form = AccountImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                report = accounts_import(payload=form.cleaned_data["payload"], now=timezone.now())
            except ImportUnreadable as error:
                form.add_error(None, str(error))
        summary = None
        if report is not None:
            summary = (
                f"{report.source_format}: {report.count(ImportOutcome.IMPORTED)} imported, "
                f"{report.count(ImportOutcome.UPDATED)} updated, "
                f"{report.count(ImportOutcome.SKIPPED)} skipped, "
                f"{report.count(ImportOutcome.INVALID)} invalid."
            )
        return _page(
            request,
            "admin/proxy/account_import.html",
            {
                "title": "Import accounts",
                "form": form,
                "report": report,
                "summary": summary,
                "opts": Account._meta,
            },
            self.admin_site,
        )

    def test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        account = Account.objects.filter(pk=object_id).first()
        if account is None:
            raise Http404("No such account")
        return _page(
            request,
            "admin/proxy/account_test.html",
            {
                "title": f"Test {account}",
                "account": account,
                "default_model": DEFAULT_MODEL_ID,
                "test_url": "/api/admin/accounts/test",
                "opts": Account._meta,
            },
            self.admin_site,
        )

    def _set_status(self, request, queryset, status: str) -> None:
        now = timezone.now()
        for account in queryset:
            account_update_by_admin(account=account, label=account.label, status=status, now=now)
        self.message_user(request, f"{queryset.count()} account(s) set {status}.", messages.INFO)

    @admin.action(description="Enable (active)")
    def enable_accounts(self, request, queryset) -> None:
        self._set_status(request, queryset, AccountStatus.ACTIVE)

    @admin.action(description="Disable")
    def disable_accounts(self, request, queryset) -> None:
        self._set_status(request, queryset, AccountStatus.DISABLED)


class ClientKeyPagesMixin(_ModelAdminMixin):
    """Added to the client key admin: a "use" page with the key, copy buttons, the Codex CLI
    configuration and the CC Switch link."""

    @admin.display(description="use")
    def use_link(self, obj: ClientApiKey) -> str:
        return format_html(
            '<a href="{}">copy / config</a>', reverse("admin:proxy_clientapikey_use", args=[obj.pk])
        )

    def get_urls(self) -> list[URLPattern]:
        use = path(
            "<path:object_id>/use/",
            self.admin_site.admin_view(self.use_view),
            name="proxy_clientapikey_use",
        )
        return [use, *super().get_urls()]

    def use_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        key = ClientApiKey.objects.filter(pk=object_id).first()
        if key is None:
            raise Http404("No such key")
        config = client_config(key=key, origin=request.build_absolute_uri("/").rstrip("/"))
        return _page(
            request,
            "admin/proxy/key_use.html",
            {"title": f"Use {key.name}", "key": key, "config": config, "opts": ClientApiKey._meta},
            self.admin_site,
        )
