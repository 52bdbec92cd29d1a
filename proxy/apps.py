from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "proxy"
    verbose_name = "Codex Proxy"
    default_auto_field = "django.db.models.BigAutoField"
