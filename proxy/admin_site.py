"""The operators' console as Django's default admin site (config.apps.AdminSiteConfig)."""

from __future__ import annotations

import functools

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils import timezone

from proxy.admin_api.display import console_zone_label
from proxy.admin_secrets import SecretLookupGuard
from proxy.admin_usage.views import usage_urls
from proxy.forms import TOO_MANY_ATTEMPTS, AdminLoginForm, AdminPasswordChangeForm

# The dashboard page loads only its own files (the vendored Chart.js included) and talks only to
# its own origin's admin API.
DASHBOARD_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


class OperatorsAdminSite(admin.AdminSite):
    site_header = "Operators' console"
    site_title = "Operators' console"
    login_form = AdminLoginForm
    index_template = "admin/proxy/index.html"

    def admin_view(self, view, cacheable=False):
        """Every console page answers 400 for a NUL character in its path or query (an object
        id with one would reach PostgreSQL, which refuses NUL in text, as a 500)."""
        protected = super().admin_view(view, cacheable)

        @functools.wraps(protected)
        def refusing_nul(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            query = (value for pair in request.GET.lists() for value in (pair[0], *pair[1]))
            if "\x00" in request.path or any("\x00" in value for value in query):
                return HttpResponseBadRequest(
                    "The address contains a NUL character.", content_type="text/plain"
                )
            return protected(request, *args, **kwargs)

        return refusing_nul

    def each_context(self, request: HttpRequest) -> dict:
        """Django's, plus the console's time zone for the header, and the dashboard as the
        header's first link (the proxy serves no page at ``/``)."""
        context = super().each_context(request)
        context["console_time_zone"] = console_zone_label(timezone.now())
        context["site_url"] = reverse("admin:dashboard", current_app=self.name)
        return context

    def get_urls(self) -> list[URLResolver | URLPattern]:
        dashboard = path("dashboard/", self.admin_view(self.dashboard), name="dashboard")
        return [dashboard, *usage_urls(self), *super().get_urls()]

    def dashboard(self, request: HttpRequest) -> HttpResponse:
        """The proxy's dashboard: drawn in the browser from /api/admin/dashboard/summary (the
        same session cookie), refreshing itself."""
        context = {
            **self.each_context(request),
            "title": "Dashboard",
            "summary_url": "/api/admin/dashboard/summary",
            "refresh_seconds": settings.ADMIN_DASHBOARD_REFRESH_SECONDS,
            "docs_url": reverse("api-docs"),
        }
        response = TemplateResponse(request, "admin/proxy/dashboard.html", context)
        response["Content-Security-Policy"] = DASHBOARD_CSP
        return response

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

    # django-stubs say TemplateResponse; Django's own answers a saved form with a redirect.
    def password_change(  # type: ignore[override]
        self, request: HttpRequest, extra_context: dict | None = None
    ) -> HttpResponseBase:
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
