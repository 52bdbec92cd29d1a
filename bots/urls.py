"""Mounted at ``/telegram/`` by ``config/urls.py``."""

from django.urls import path, re_path

from bots import verify_views, views

app_name = "bots"

urlpatterns = [
    path("webhook", views.TelegramWebhookView.as_view(), name="webhook"),
    re_path(r"^setwebhook/(?P<secret>[^/]+)$", views.SetWebhookView.as_view(), name="setwebhook"),
    re_path(
        r"^deletewebhook/(?P<secret>[^/]+)$",
        views.DeleteWebhookView.as_view(),
        name="deletewebhook",
    ),
    path("health", views.HealthView.as_view(), name="health"),
    path("selfcheck", views.SelfcheckView.as_view(), name="selfcheck"),
    path("verify", verify_views.verify_page, name="verify_page"),
    path(
        "api/verify/turnstile",
        verify_views.turnstile_submit_view,
        name="verify_turnstile",
    ),
    re_path(r"", views.not_found),
]
