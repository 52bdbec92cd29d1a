from django.apps import AppConfig


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Support bot"
    default_auto_field = "django.db.models.BigAutoField"
