"""``/api/admin/*`` (spec §6.2–§6.7, §6.9) and the OpenAPI document with its docs pages."""

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from proxy.admin_api.envelope import unknown_admin_route
from proxy.admin_api.views import (
    account_actions,
    account_policies,
    accounts,
    auth,
    dashboard,
    key_policies,
    keys,
    usage,
)
from proxy.admin_api.views import settings as settings_views

admin_api_patterns = [
    path("login", auth.LoginView.as_view()),
    path("auth/status", auth.AuthStatusView.as_view()),
    path("logout", auth.LogoutView.as_view()),
    path("accounts", accounts.AccountsView.as_view()),
    path("accounts/detail", accounts.AccountDetailView.as_view()),
    path("accounts/import", accounts.AccountImportView.as_view()),
    path("accounts/export", accounts.AccountExportView.as_view()),
    path("accounts/update", accounts.AccountUpdateView.as_view()),
    path("accounts/delete", accounts.AccountDeleteView.as_view()),
    path("accounts/refresh", account_actions.AccountRefreshView.as_view()),
    path("accounts/health-check", account_actions.AccountHealthCheckView.as_view()),
    path("accounts/quota", account_actions.AccountQuotaView.as_view()),
    path("accounts/models", account_actions.AccountModelsView.as_view()),
    path("accounts/test", account_actions.AccountTestView.as_view()),
    path("accounts/oauth/authorize", account_actions.OAuthAuthorizeView.as_view()),
    path("accounts/oauth/exchange", account_actions.OAuthExchangeView.as_view()),
    path("accounts/policy", account_policies.AccountPolicyView.as_view()),
    path("keys", keys.KeysView.as_view()),
    path("keys/update", keys.KeyUpdateView.as_view()),
    path("keys/delete", keys.KeyDeleteView.as_view()),
    path("keys/config", keys.KeyConfigView.as_view()),
    path("keys/policy", key_policies.KeyPolicyView.as_view()),
    path("settings", settings_views.SettingsView.as_view()),
    path("settings/admin-api-key", settings_views.AdminApiKeyView.as_view()),
    path("settings/admin-api-key/regenerate", settings_views.AdminApiKeyRegenerateView.as_view()),
    path("usage/records", usage.UsageRecordsView.as_view()),
    path("usage/records/detail", usage.UsageRecordDetailView.as_view()),
    path("usage/records/delete", usage.UsageRecordsClearView.as_view()),
    path("usage/records/summary", usage.UsageSummaryView.as_view()),
    path("usage/records/insights/models", usage.ModelInsightsView.as_view()),
    path("usage/records/insights/endpoints", usage.EndpointInsightsView.as_view()),
    path("usage/records/insights/token-trend", usage.UsageTrendView.as_view()),
    path("usage/records/insights/latency-trend", usage.UsageTrendView.as_view()),
    path("ops/errors", usage.OpsErrorsView.as_view()),
    path("dashboard/summary", dashboard.DashboardSummaryView.as_view()),
    path("dashboard/trend", dashboard.DashboardTrendView.as_view()),
    path("dashboard/runway", dashboard.DashboardRunwayView.as_view()),
    re_path(r"^(?P<path>.*)$", unknown_admin_route),
]

schema_patterns = [
    path("", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
]
