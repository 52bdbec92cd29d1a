"""Tables of the proxy's storage document (seed 004_..., §4).

Names, types, nullability, defaults, CHECKs and indexes follow the seed exactly; a test diffs
the migrated catalog against the seed's own DDL. Conventions that keep the catalog identical:

* CHECK constraints carry PostgreSQL's own name for an inline column check,
  ``<table>_<column>_check``; unique constraints ``<table>_<columns>_key``.
* Foreign keys are declared with ``db_constraint=False`` and created by the migration as the
  seed writes them (``<table>_<column>_fkey ... ON DELETE CASCADE``), because Django 5.2 cannot
  put ON DELETE CASCADE in the database. ``on_delete=DO_NOTHING`` leaves the cascade to it.
* No index beyond the seed's: ``db_index=False`` on foreign keys.
"""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from proxy.model_constraints import check as _check
from proxy.model_constraints import non_negative as _non_negative
from proxy.models_admin import AdminLoginEvent, AdminUser  # noqa: F401 - the app's models
from proxy.models_policies import AccountPolicy, ClientApiKeyPolicy  # noqa: F401 - the app's models


class RotationStrategy(models.TextChoices):
    SMART = "smart"
    QUOTA_RESET_PRIORITY = "quota_reset_priority"
    ROUND_ROBIN = "round_robin"
    STICKY = "sticky"


class RuntimeSettings(models.Model):
    """``runtime_settings`` (§4.4): the hot-reloadable global configuration, one row (id = 1)."""

    SINGLETON_ID = 1

    id = models.BigIntegerField(primary_key=True)
    model_aliases_json = models.JSONField(db_default={})
    refresh_margin_seconds = models.BigIntegerField()
    refresh_concurrency = models.BigIntegerField()
    max_concurrent_per_account = models.BigIntegerField()
    request_interval_ms = models.BigIntegerField()
    rotation_strategy = models.TextField(choices=RotationStrategy.choices)
    admin_api_key_hash = models.TextField(null=True, blank=True)
    usage_retention_days = models.BigIntegerField(db_default=30)
    ops_error_retention_days = models.BigIntegerField(db_default=30)
    bucket_retention_days = models.BigIntegerField(db_default=90)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "runtime_settings"
        verbose_name = "runtime settings"
        verbose_name_plural = "runtime settings"
        constraints = [
            _check("runtime_settings", "id", Q(id=1)),
            _check("runtime_settings", "refresh_margin_seconds", Q(refresh_margin_seconds__gt=0)),
            _check("runtime_settings", "refresh_concurrency", Q(refresh_concurrency__gt=0)),
            _check(
                "runtime_settings",
                "max_concurrent_per_account",
                Q(max_concurrent_per_account__gt=0),
            ),
            _check("runtime_settings", "request_interval_ms", Q(request_interval_ms__gte=0)),
            _check(
                "runtime_settings",
                "rotation_strategy",
                Q(rotation_strategy__in=RotationStrategy.values),
            ),
            _check("runtime_settings", "usage_retention_days", Q(usage_retention_days__gt=0)),
            _check(
                "runtime_settings", "ops_error_retention_days", Q(ops_error_retention_days__gt=0)
            ),
            _check("runtime_settings", "bucket_retention_days", Q(bucket_retention_days__gt=0)),
        ]

    def __str__(self) -> str:
        return "runtime settings"


class ClientApiKey(models.Model):
    """``client_api_keys`` (§4.3): keys clients present to ``/v1``; ``key`` is a secret."""

    id = models.TextField(primary_key=True)
    name = models.TextField()
    prefix = models.TextField()
    key = models.TextField()
    label = models.TextField(null=True, blank=True)
    enabled = models.BooleanField(db_default=True)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "client_api_keys"
        verbose_name = "client API key"
        constraints = [models.UniqueConstraint(fields=["key"], name="client_api_keys_key_key")]
        indexes = [
            models.Index(
                F("created_at").desc(), F("id").desc(), name="idx_client_api_keys_created_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class AccountStatus(models.TextChoices):
    ACTIVE = "active"
    EXPIRED = "expired"
    QUOTA_EXHAUSTED = "quota_exhausted"
    DISABLED = "disabled"
    BANNED = "banned"


class Account(models.Model):
    """``accounts`` (§4.5): an upstream ChatGPT account; tokens are secrets."""

    id = models.TextField(primary_key=True)
    email = models.TextField(null=True, blank=True)
    chatgpt_account_id = models.TextField(null=True, blank=True)
    chatgpt_user_id = models.TextField(null=True, blank=True)
    label = models.TextField(null=True, blank=True)
    plan_type = models.TextField(null=True, blank=True)
    access_token = models.TextField()
    refresh_token = models.TextField(null=True, blank=True)
    access_token_expires_at = models.DateTimeField(null=True, blank=True)
    next_refresh_at = models.DateTimeField(null=True, blank=True)
    status = models.TextField(choices=AccountStatus.choices)
    quota_json = models.JSONField(null=True, blank=True)
    quota_fetched_at = models.DateTimeField(null=True, blank=True)
    quota_limit_reached = models.BooleanField(db_default=False)
    quota_verify_required = models.BooleanField(db_default=False)
    quota_cooldown_until = models.DateTimeField(null=True, blank=True)
    cloudflare_cooldown_until = models.DateTimeField(null=True, blank=True)
    added_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "accounts"
        constraints = [
            _check("accounts", "status", Q(status__in=AccountStatus.values)),
            models.UniqueConstraint(
                F("chatgpt_account_id"),
                Coalesce(F("chatgpt_user_id"), models.Value("")),
                condition=Q(chatgpt_account_id__isnull=False),
                name="ux_accounts_chatgpt_identity",
            ),
        ]
        indexes = [models.Index(F("added_at").desc(), F("id").desc(), name="idx_accounts_added_id")]

    def __str__(self) -> str:
        return self.label or self.email or self.id


ACCOUNT_USAGE_COUNTERS = (
    "request_count",
    "empty_response_count",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "total_tokens",
    "image_input_tokens",
    "image_output_tokens",
    "image_request_count",
    "image_request_failed_count",
    "window_request_count",
    "window_input_tokens",
    "window_output_tokens",
    "window_cached_tokens",
    "window_image_input_tokens",
    "window_image_output_tokens",
    "window_image_request_count",
    "window_image_request_failed_count",
)


class AccountUsage(models.Model):
    """``account_usage`` (§4.6): lifetime and current-window counters of one account.

    The lifetime counters cannot be rebuilt (the facts expire), so they change only through
    the add-to-count upsert in ``proxy.services.account_usage``.
    """

    account = models.OneToOneField(
        Account,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="usage",
    )
    request_count = models.BigIntegerField(db_default=0)
    empty_response_count = models.BigIntegerField(db_default=0)
    input_tokens = models.BigIntegerField(db_default=0)
    output_tokens = models.BigIntegerField(db_default=0)
    cached_tokens = models.BigIntegerField(db_default=0)
    reasoning_tokens = models.BigIntegerField(db_default=0)
    total_tokens = models.BigIntegerField(db_default=0)
    image_input_tokens = models.BigIntegerField(db_default=0)
    image_output_tokens = models.BigIntegerField(db_default=0)
    image_request_count = models.BigIntegerField(db_default=0)
    image_request_failed_count = models.BigIntegerField(db_default=0)
    window_request_count = models.BigIntegerField(db_default=0)
    window_input_tokens = models.BigIntegerField(db_default=0)
    window_output_tokens = models.BigIntegerField(db_default=0)
    window_cached_tokens = models.BigIntegerField(db_default=0)
    window_image_input_tokens = models.BigIntegerField(db_default=0)
    window_image_output_tokens = models.BigIntegerField(db_default=0)
    window_image_request_count = models.BigIntegerField(db_default=0)
    window_image_request_failed_count = models.BigIntegerField(db_default=0)
    window_started_at = models.DateTimeField(null=True, blank=True)
    window_reset_at = models.DateTimeField(null=True, blank=True)
    limit_window_seconds = models.BigIntegerField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "account_usage"
        verbose_name = "account usage"
        verbose_name_plural = "account usage"
        constraints = [
            *_non_negative("account_usage", *ACCOUNT_USAGE_COUNTERS),
            _check(
                "account_usage",
                "limit_window_seconds",
                Q(limit_window_seconds__isnull=True) | Q(limit_window_seconds__gt=0),
            ),
        ]

    def __str__(self) -> str:
        return f"usage of {self.account_id}"


class AccountCookie(models.Model):
    """``account_cookies`` (§4.10): upstream cookies per account (RFC 6265); ``value`` is secret."""

    id = models.TextField(primary_key=True)
    account = models.ForeignKey(
        Account,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="cookies",
    )
    domain = models.TextField()
    name = models.TextField()
    value = models.TextField()
    path = models.TextField(db_default="/")
    expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "account_cookies"
        constraints = [
            models.UniqueConstraint(
                fields=["account", "domain", "name", "path"],
                name="account_cookies_account_id_domain_name_path_key",
            )
        ]
        indexes = [
            models.Index(fields=["account", "domain"], name="idx_account_cookies_account_domain"),
            models.Index(
                fields=["expires_at"],
                condition=Q(expires_at__isnull=False),
                name="idx_account_cookies_expires",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {self.domain}{self.path}"


class Fingerprint(models.Model):
    """``fingerprints`` (§4.11): the upstream device identity template (row ``current``)."""

    CURRENT_ID = "current"

    id = models.TextField(primary_key=True)
    originator = models.TextField()
    app_version = models.TextField()
    build_number = models.TextField()
    platform = models.TextField()
    arch = models.TextField()
    chromium_version = models.TextField()
    user_agent_template = models.TextField()
    default_headers_json = models.JSONField()
    header_order_json = models.JSONField()
    source = models.TextField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "fingerprints"

    def __str__(self) -> str:
        return f"{self.originator} {self.app_version} ({self.build_number})"


class FingerprintUpdateHistory(models.Model):
    """``fingerprint_update_history`` (§4.12): audit of fingerprint updates, newest 100 kept."""

    id = models.TextField(primary_key=True)
    current_fingerprint = models.ForeignKey(
        Fingerprint,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="history",
    )
    app_version = models.TextField()
    build_number = models.TextField()
    chromium_version = models.TextField(null=True, blank=True)
    source = models.TextField()
    manifest_json = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "fingerprint_update_history"
        verbose_name = "fingerprint update"
        verbose_name_plural = "fingerprint update history"
        indexes = [
            models.Index(
                F("created_at").desc(),
                F("id").desc(),
                name="idx_fingerprint_update_history_created_id",
            ),
            models.Index(
                fields=["current_fingerprint"], name="idx_fingerprint_update_history_fingerprint"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.app_version} ({self.build_number}) from {self.source}"
