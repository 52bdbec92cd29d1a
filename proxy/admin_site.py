"""The operators' console as Django's default admin site (config.apps.AdminSiteConfig)."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponse

from proxy.admin_secrets import SecretLookupGuard
from proxy.forms import TOO_MANY_ATTEMPTS, AdminLoginForm, AdminPasswordChangeForm


class OperatorsAdminSite(admin.AdminSite):
    site_header = "Operators' console"
    site_title = "Operators' console"
    login_form = AdminLoginForm

    def register(self, model_or_iterable, admin_class=None, **options) -> None:
        """Every admin of this site refuses list lookups through secret columns
        (``proxy.admin_secrets``), whichever app registers it."""
        base = admin_class or admin.ModelAdmin
        if not issubclass(base, SecretLookupGuard):
            base = type(base.__name__, (SecretLookupGuard, base), {"__module__": base.__module__})
        super().register(model_or_iterable, base, **options)

    def login(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        """Django's log-in page; a throttled attempt is answered 429 with Retry-After."""
        response = super().login(request, extra_context)
        form = getattr(response, "context_data", {}).get("form")
        if isinstance(form, AdminLoginForm) and form.has_error(NON_FIELD_ERRORS, TOO_MANY_ATTEMPTS):
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after_seconds)
        return response

    def password_change(
        self, request: HttpRequest, extra_context: dict | None = None
    ) -> HttpResponse:
        """Django's view with the form that saves through the service (sessions end)."""
        from django.contrib.auth.views import PasswordChangeView
        from django.urls import reverse

        request.current_app = self.name
        return PasswordChangeView.as_view(
            form_class=AdminPasswordChangeForm,
            success_url=reverse("admin:password_change_done", current_app=self.name),
            extra_context={**self.each_context(request), **(extra_context or {})},
            **(
                {"template_name": self.password_change_template}
                if self.password_change_template is not None
                else {}
            ),
        )(request)
