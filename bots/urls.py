"""Mounted at ``/telegram/`` by ``config/urls.py``."""

from django.urls import path, re_path

from bots import views

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
    re_path(r"", views.not_found),
]
