"""The proxy's ledger (seed 004 §4.7–§4.9): facts and their 15-minute rollup.

Facts carry no foreign keys by design (seed §3): deleting an account or a key must not erase
history. CHECK constraints carry PostgreSQL's own names for inline column checks
(``<table>_<column>_check``) so that the catalog equals the seed's DDL.
"""

from django.db import models
from django.db.models import F, Q

UNKNOWN_DIMENSION = "__unknown__"


def _check(table: str, column: str, condition: Q) -> models.CheckConstraint:
    return models.CheckConstraint(condition=condition, name=f"{table}_{column}_check")


def _null_or_non_negative(table: str, *columns: str) -> list[models.CheckConstraint]:
    return [
        _check(table, column, Q(**{f"{column}__isnull": True}) | Q(**{f"{column}__gte": 0}))
        for column in columns
    ]


def _null_or_http_status(table: str, *columns: str) -> list[models.CheckConstraint]:
    return [
        _check(
            table,
            column,
            Q(**{f"{column}__isnull": True}) | Q(**{f"{column}__gte": 100, f"{column}__lte": 599}),
        )
        for column in columns
    ]


def _partial_index(table: str, suffix: str, *expressions, not_null: str) -> models.Index:
    return models.Index(
        *expressions,
        condition=Q(**{f"{not_null}__isnull": False}),
        name=f"idx_{table}_{suffix}",
    )


class UsageRecord(models.Model):
    """``usage_records`` ★: exactly one row per successful client request (status 200–399)."""

    id = models.TextField(primary_key=True)
    request_id = models.TextField(null=True, blank=True)
    client_api_key_id = models.TextField(null=True, blank=True)
    kind = models.TextField()
    route = models.TextField(null=True, blank=True)
    provider = models.TextField()
    account_id = models.TextField()
    model = models.TextField()
    requested_model = models.TextField(null=True, blank=True)
    upstream_model = models.TextField(null=True, blank=True)
    service_tier = models.TextField(null=True, blank=True)
    status_code = models.IntegerField()
    transport = models.TextField(null=True, blank=True)
    attempt_index = models.BigIntegerField(null=True, blank=True)
    response_id = models.TextField(null=True, blank=True)
    upstream_request_id = models.TextField(null=True, blank=True)
    latency_ms = models.BigIntegerField(null=True, blank=True)
    first_token_ms = models.BigIntegerField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cached_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)
    message = models.TextField()
    metadata_json = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        db_table = "usage_records"
        constraints = [
            _check("usage_records", "status_code", Q(status_code__gte=200, status_code__lte=399)),
            *_null_or_non_negative(
                "usage_records",
                "attempt_index",
                "latency_ms",
                "first_token_ms",
                "input_tokens",
                "output_tokens",
                "cached_tokens",
                "reasoning_tokens",
            ),
        ]
        indexes = [
            models.Index(
                F("created_at").desc(), F("id").desc(), name="idx_usage_records_created_id"
            ),
            _partial_index("usage_records", "request_id", "request_id", not_null="request_id"),
            models.Index(F("kind"), F("created_at").desc(), name="idx_usage_records_kind_created"),
            models.Index(
                F("account_id"), F("created_at").desc(), name="idx_usage_records_account_created"
            ),
            models.Index(
                F("model"), F("created_at").desc(), name="idx_usage_records_model_created"
            ),
            _partial_index(
                "usage_records",
                "key_created",
                F("client_api_key_id"),
                F("created_at").desc(),
                not_null="client_api_key_id",
            ),
            _partial_index("usage_records", "response_id", "response_id", not_null="response_id"),
            _partial_index(
                "usage_records",
                "upstream_request_id",
                "upstream_request_id",
                not_null="upstream_request_id",
            ),
        ]

    def __str__(self) -> str:
        return self.id


class OpsErrorLog(models.Model):
    """``ops_error_logs`` ★: exactly one row per failed request or operational error."""

    id = models.TextField(primary_key=True)
    request_id = models.TextField(null=True, blank=True)
    client_api_key_id = models.TextField(null=True, blank=True)
    kind = models.TextField()
    provider = models.TextField(null=True, blank=True)
    account_id = models.TextField(null=True, blank=True)
    route = models.TextField(null=True, blank=True)
    model = models.TextField(null=True, blank=True)
    status_code = models.IntegerField(null=True, blank=True)
    client_status_code = models.IntegerField(null=True, blank=True)
    upstream_status_code = models.IntegerField(null=True, blank=True)
    transport = models.TextField(null=True, blank=True)
    attempt_index = models.BigIntegerField(null=True, blank=True)
    failure_class = models.TextField(null=True, blank=True)
    response_id = models.TextField(null=True, blank=True)
    upstream_request_id = models.TextField(null=True, blank=True)
    latency_ms = models.BigIntegerField(null=True, blank=True)
    message = models.TextField()
    metadata_json = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        db_table = "ops_error_logs"
        verbose_name = "ops error log"
        constraints = [
            *_null_or_http_status(
                "ops_error_logs", "status_code", "client_status_code", "upstream_status_code"
            ),
            *_null_or_non_negative("ops_error_logs", "attempt_index", "latency_ms"),
        ]
        indexes = [
            models.Index(
                F("created_at").desc(), F("id").desc(), name="idx_ops_error_logs_created_id"
            ),
            _partial_index("ops_error_logs", "request_id", "request_id", not_null="request_id"),
            _partial_index(
                "ops_error_logs",
                "key_created",
                F("client_api_key_id"),
                F("created_at").desc(),
                not_null="client_api_key_id",
            ),
            _partial_index(
                "ops_error_logs",
                "account",
                F("account_id"),
                F("created_at").desc(),
                not_null="account_id",
            ),
            _partial_index(
                "ops_error_logs",
                "route_created",
                F("route"),
                F("created_at").desc(),
                not_null="route",
            ),
            _partial_index(
                "ops_error_logs",
                "model_created",
                F("model"),
                F("created_at").desc(),
                not_null="model",
            ),
            _partial_index(
                "ops_error_logs",
                "status_created",
                F("status_code"),
                F("created_at").desc(),
                not_null="status_code",
            ),
            _partial_index(
                "ops_error_logs",
                "transport_created",
                F("transport"),
                F("created_at").desc(),
                not_null="transport",
            ),
            _partial_index(
                "ops_error_logs",
                "failure_class",
                F("failure_class"),
                F("created_at").desc(),
                not_null="failure_class",
            ),
            _partial_index("ops_error_logs", "response_id", "response_id", not_null="response_id"),
            _partial_index(
                "ops_error_logs",
                "upstream_request_id",
                "upstream_request_id",
                not_null="upstream_request_id",
            ),
        ]

    def __str__(self) -> str:
        return self.id


_BUCKET_COUNTERS = (
    "success_count",
    "error_count",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "first_token_latency_sum",
    "first_token_latency_count",
    "latency_sum",
    "latency_count",
    "max_latency_ms",
)


class BucketColumns(models.Model):
    """The columns of ``request_time_buckets`` (seed 004 §4.9), shared by the table's model and
    the admin's read-only view of it; each declares its own key."""

    bucket_start = models.DateTimeField()
    provider = models.TextField(db_default=UNKNOWN_DIMENSION)
    account_id = models.TextField(db_default=UNKNOWN_DIMENSION)
    model = models.TextField(db_default=UNKNOWN_DIMENSION)
    service_tier = models.TextField(db_default=UNKNOWN_DIMENSION)
    success_count = models.BigIntegerField(db_default=0)
    error_count = models.BigIntegerField(db_default=0)
    input_tokens = models.BigIntegerField(db_default=0)
    output_tokens = models.BigIntegerField(db_default=0)
    cached_tokens = models.BigIntegerField(db_default=0)
    first_token_latency_sum = models.BigIntegerField(db_default=0)
    first_token_latency_count = models.BigIntegerField(db_default=0)
    latency_sum = models.BigIntegerField(db_default=0)
    latency_count = models.BigIntegerField(db_default=0)
    max_latency_ms = models.BigIntegerField(db_default=0)
    min_latency_ms = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.bucket_start:%Y-%m-%d %H:%M} {self.account_id} {self.model}"


class RequestTimeBucket(BucketColumns):
    """``request_time_buckets`` ★: 15-minute × provider × account × model × tier rollup.

    Written only by the add-to-count upserts of ``telemetry.services`` (in the same
    transaction as the fact) and by ``rebuild_buckets``. ``request_count`` is not stored: it is
    success_count + error_count at query time.
    """

    pk = models.CompositePrimaryKey(
        "bucket_start", "provider", "account_id", "model", "service_tier"
    )

    class Meta:
        db_table = "request_time_buckets"
        constraints = [
            *[
                _check("request_time_buckets", column, Q(**{f"{column}__gte": 0}))
                for column in _BUCKET_COUNTERS
            ],
            *_null_or_non_negative("request_time_buckets", "min_latency_ms"),
        ]


class RequestTimeBucketListing(BucketColumns):
    """Read-only view of ``request_time_buckets`` for the Django admin.

    Django 5.2's admin refuses models with a composite primary key, so the admin lists the
    same table through this unmanaged model. Its "primary key" is not unique: it is never used
    to load, save or delete a row (the admin for it allows none of those).
    """

    bucket_start = models.DateTimeField(primary_key=True)

    class Meta:
        managed = False
        db_table = "request_time_buckets"
        verbose_name = "request time bucket"
        ordering = ["-bucket_start", "account_id", "model"]
