from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig
from django.db.models.signals import post_migrate


class AdminSiteConfig(AdminConfig):
    """Django's admin, with the operators' console as the default site."""

    default_site = "proxy.admin_site.OperatorsAdminSite"


class ProjectConfig(AppConfig):
    """The project's own wiring as an app: records the schema history after every migrate and
    installs the linear cookie unquoting (config/cookie_safety.py)."""

    name = "config"
    label = "project"
    verbose_name = "Project"

    def ready(self) -> None:
        from django.apps import apps

        from config import cookie_safety
        from config.schema_history import record_schema_history_after_migrate

        # Before any request is served: no quadratic cookie unquoting (CVE-2024-7592).
        cookie_safety.install()

        # Django sends post_migrate only to apps with a models module, once per app and after
        # the whole migrate run; listening to one such app records the history once per run.
        post_migrate.connect(
            record_schema_history_after_migrate,
            sender=apps.get_app_config("proxy"),
            dispatch_uid="config.schema_history.record",
        )
