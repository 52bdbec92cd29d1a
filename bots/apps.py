from django.apps import AppConfig


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Support bot"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from bots.log_redaction import install_admin_secret_redaction

        install_admin_secret_redaction()
