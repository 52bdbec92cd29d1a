"""The admin API key on the settings page: regenerate (the new key shown once, on the answer to
the confirming POST) and revoke, through the same services as the admin API's
``settings/admin-api-key`` routes.

The key is never kept anywhere it could be shown again: not in the session or a message (both
live in Redis), not in a log; only its SHA-256 is stored. The page that shows it is not cached
(every admin view is ``never_cache``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from proxy.models import RuntimeSettings
from proxy.services.admin_api_key import (
    admin_api_key_delete,
    admin_api_key_fingerprint,
    admin_api_key_regenerate,
)
from proxy.services.runtime_settings import runtime_settings_ensure

PAGE_TEMPLATE = "admin/proxy/runtimesettings/admin_api_key.html"

if TYPE_CHECKING:
    # A mixin of ModelAdmins: checked as one (at run time a plain class).
    _ModelAdminMixin = admin.ModelAdmin[Any]
else:
    _ModelAdminMixin = object


def api_key_state() -> dict[str, Any]:
    """What the settings page says about the key: whether one is set, and its fingerprint."""
    fingerprint = admin_api_key_fingerprint()
    return {"api_key_exists": fingerprint is not None, "api_key_fingerprint": fingerprint}


class AdminApiKeyPagesMixin(_ModelAdminMixin):
    """Added to the runtime settings admin: the two pages of the admin API key."""

    def get_urls(self) -> list[URLPattern]:
        pages = [
            path(
                "admin-api-key/regenerate/",
                self.admin_site.admin_view(self.api_key_regenerate_view),
                name="proxy_runtimesettings_api_key_regenerate",
            ),
            path(
                "admin-api-key/revoke/",
                self.admin_site.admin_view(self.api_key_revoke_view),
                name="proxy_runtimesettings_api_key_revoke",
            ),
        ]
        return [*pages, *super().get_urls()]

    def _settings_row(self, request: HttpRequest) -> RuntimeSettings:
        if not self.has_change_permission(request):
            raise PermissionDenied
        return runtime_settings_ensure(now=timezone.now())

    def _page(self, request: HttpRequest, step: str, **context: Any) -> TemplateResponse:
        return TemplateResponse(
            request,
            PAGE_TEMPLATE,
            {
                **self.admin_site.each_context(request),
                "opts": RuntimeSettings._meta,
                "title": "Admin API key",
                "step": step,
                "settings_url": reverse(
                    "admin:proxy_runtimesettings_change", args=[RuntimeSettings.SINGLETON_ID]
                ),
                **api_key_state(),
                **context,
            },
        )

    def api_key_regenerate_view(self, request: HttpRequest) -> HttpResponse:
        """GET: what regenerating does, and the button. POST: a new key, shown on this answer
        only (the old one stops working at once)."""
        row = self._settings_row(request)
        if request.method == "GET":
            return self._page(request, "confirm-regenerate")
        if request.method != "POST":
            return HttpResponseNotAllowed(["GET", "POST"])
        replaced = admin_api_key_fingerprint()
        key = admin_api_key_regenerate(now=timezone.now())
        self.log_change(
            request,
            row,
            "Regenerated the admin API key"
            + (f" (replacing {replaced}…)" if replaced else "")
            + f"; new key {admin_api_key_fingerprint()}….",
        )
        return self._page(request, "issued", new_key=key, replaced_fingerprint=replaced)

    def api_key_revoke_view(self, request: HttpRequest) -> HttpResponse:
        """GET: what revoking does, and the button. POST: no key any more; back to settings."""
        row = self._settings_row(request)
        if request.method == "GET":
            return self._page(request, "confirm-revoke")
        if request.method != "POST":
            return HttpResponseNotAllowed(["GET", "POST"])
        revoked = admin_api_key_fingerprint()
        if admin_api_key_delete(now=timezone.now()):
            self.log_change(request, row, f"Revoked the admin API key {revoked}….")
            self.message_user(
                request,
                "The admin API key was revoked: a call with it is now refused (401).",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, "No admin API key was set: nothing to revoke.")
        return HttpResponseRedirect(
            reverse("admin:proxy_runtimesettings_change", args=[RuntimeSettings.SINGLETON_ID])
        )
