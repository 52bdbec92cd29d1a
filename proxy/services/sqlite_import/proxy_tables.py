"""The proxy's tables of ``import_sqlite`` (seed 004 §6.2), from the open v3 source.

Every table goes in with one COPY, in foreign-key order (accounts before their usage and
cookies, fingerprints before their history), inside the caller's transaction.
"""

from __future__ import annotations

import hashlib

from psycopg.types.json import Jsonb

from proxy.models import ACCOUNT_USAGE_COUNTERS, AccountStatus
from telemetry.services.legacy_sqlite import (
    ImportReport,
    SourceRow,
    copy_rows,
    parse_cookie_expiry,
    source_count,
    source_rows,
)

# Runtime state of v3 that is not imported (seed §6.3 loss list), and the per-model usage
# table nothing reads any more (§2.10).
DROPPED_TABLES = (
    "admin_sessions",
    "session_affinities",
    "account_refresh_leases",
    "model_plan_snapshots",
    "account_model_usage",
)
# Django's Argon2 hasher stores "argon2" + the PHC string the original's argon2 crate wrote.
_DJANGO_ARGON2_PREFIX = "argon2"


def import_proxy_tables(*, source, report: ImportReport) -> None:
    """Import v3's admin_users … fingerprint_update_history. Raises ImportDataError."""
    for table, columns, convert in (
        ("admin_users", ("id", "password_hash", "created_at", "updated_at"), _admin_user),
        (
            "client_api_keys",
            ("id", "name", "prefix", "key", "label", "enabled", "created_at", "last_used_at"),
            _client_api_key,
        ),
        ("runtime_settings", _SETTINGS_COLUMNS, _runtime_settings),
        ("accounts", _ACCOUNT_COLUMNS, _account),
        ("account_usage", _ACCOUNT_USAGE_COLUMNS, _account_usage),
        (
            "account_cookies",
            ("id", "account_id", "domain", "name", "value", "path", "expires_at", "updated_at"),
            _account_cookie,
        ),
        ("fingerprints", _FINGERPRINT_COLUMNS, _fingerprint),
        ("fingerprint_update_history", _HISTORY_COLUMNS, _history),
    ):
        source_columns = _SOURCE_COLUMNS.get(table, columns)
        rows = (
            convert(row, report)
            for row in source_rows(source, table, source_columns, report=report)
        )
        report.imported[table] += copy_rows(table, columns, rows)
    for table in DROPPED_TABLES:
        report.dropped[table] += source_count(source, table)


def _admin_user(row: SourceRow, report: ImportReport) -> tuple:
    password_hash = row.text("password_hash")
    if password_hash.startswith("$argon2"):
        # The same hash in Django's spelling, so the original's password keeps working.
        password_hash = _DJANGO_ARGON2_PREFIX + password_hash
        report.normalized["admin_users: argon2 hash in Django's format"] += 1
    else:
        report.normalized["admin_users: password hash not argon2, set a new password"] += 1
    return (row.text("id"), password_hash, row.timestamp("created_at"), row.timestamp("updated_at"))


def _client_api_key(row: SourceRow, report: ImportReport) -> tuple:
    return (
        row.text("id"), row.text("name"), row.text("prefix"), row.text("key"),
        row.optional_text("label"), row.boolean("enabled"), row.timestamp("created_at"),
        row.optional_timestamp("last_used_at"),
    )  # fmt: skip


_SETTINGS_COLUMNS = (
    "id", "model_aliases_json", "refresh_margin_seconds", "refresh_concurrency",
    "max_concurrent_per_account", "request_interval_ms", "rotation_strategy",
    "admin_api_key_hash", "updated_at",
)  # fmt: skip
_SOURCE_COLUMNS = {
    "runtime_settings": tuple(
        "admin_api_key" if column == "admin_api_key_hash" else column
        for column in _SETTINGS_COLUMNS
    )
}


def admin_api_key_hash(key: str) -> str:
    """Seed §2.6: the admin API key is kept as its SHA-256 (hex), never in plain text."""
    return hashlib.sha256(key.encode()).hexdigest()


def _runtime_settings(row: SourceRow, report: ImportReport) -> tuple:
    """The three retention columns are not copied: they take their defaults (30/30/90)."""
    plain_key = row.optional_text("admin_api_key")
    key_hash = None
    if plain_key is not None and plain_key.strip():
        key_hash = admin_api_key_hash(plain_key)
        report.normalized["runtime_settings: admin_api_key -> SHA-256 admin_api_key_hash"] += 1
    return (
        row.integer("id"), Jsonb(row.json("model_aliases_json")),
        row.integer("refresh_margin_seconds"), row.integer("refresh_concurrency"),
        row.integer("max_concurrent_per_account"), row.integer("request_interval_ms"),
        row.text("rotation_strategy"), key_hash, row.timestamp("updated_at"),
    )  # fmt: skip


_ACCOUNT_COLUMNS = (
    "id", "email", "chatgpt_account_id", "chatgpt_user_id", "label", "plan_type", "access_token",
    "refresh_token", "access_token_expires_at", "next_refresh_at", "status", "quota_json",
    "quota_fetched_at", "quota_limit_reached", "quota_verify_required", "quota_cooldown_until",
    "cloudflare_cooldown_until", "added_at", "updated_at",
)  # fmt: skip


def _account(row: SourceRow, report: ImportReport) -> tuple:
    status = row.text("status")
    next_refresh_at = row.optional_timestamp("next_refresh_at")
    if status == "refreshing":
        # A transient state v3 sometimes left behind. As expired with no scheduled refresh,
        # nothing spends the refresh token on its own right after the move (seed §6.2).
        status, next_refresh_at = AccountStatus.EXPIRED.value, None
        report.normalized["accounts: refreshing -> expired, next_refresh_at cleared"] += 1
    quota = row.optional_json("quota_json")
    return (
        row.text("id"), row.optional_text("email"), row.optional_text("chatgpt_account_id"),
        row.optional_text("chatgpt_user_id"), row.optional_text("label"),
        row.optional_text("plan_type"), row.text("access_token"),
        row.optional_text("refresh_token"), row.optional_timestamp("access_token_expires_at"),
        next_refresh_at, status, None if quota is None else Jsonb(quota),
        row.optional_timestamp("quota_fetched_at"), row.boolean("quota_limit_reached"),
        row.boolean("quota_verify_required"), row.optional_timestamp("quota_cooldown_until"),
        row.optional_timestamp("cloudflare_cooldown_until"), row.timestamp("added_at"),
        row.timestamp("updated_at"),
    )  # fmt: skip


_ACCOUNT_USAGE_COLUMNS = (
    "account_id", *ACCOUNT_USAGE_COUNTERS, "window_started_at", "window_reset_at",
    "limit_window_seconds", "last_used_at",
)  # fmt: skip


def _account_usage(row: SourceRow, report: ImportReport) -> tuple:
    return (
        row.text("account_id"),
        *(row.integer(counter) for counter in ACCOUNT_USAGE_COUNTERS),
        row.optional_timestamp("window_started_at"),
        row.optional_timestamp("window_reset_at"),
        row.optional_integer("limit_window_seconds"),
        row.optional_timestamp("last_used_at"),
    )


def _account_cookie(row: SourceRow, report: ImportReport) -> tuple:
    raw_expiry = row.optional_text("expires_at")
    expires_at = None
    if raw_expiry is not None:
        expires_at = parse_cookie_expiry(raw_expiry)
        if expires_at is None:
            report.normalized["account_cookies: unparseable expires_at -> NULL (session)"] += 1
    return (
        row.text("id"), row.text("account_id"), row.text("domain"), row.text("name"),
        row.text("value"), row.text("path"), expires_at, row.timestamp("updated_at"),
    )  # fmt: skip


_FINGERPRINT_COLUMNS = (
    "id", "originator", "app_version", "build_number", "platform", "arch", "chromium_version",
    "user_agent_template", "default_headers_json", "header_order_json", "source", "created_at",
    "updated_at",
)  # fmt: skip
_FINGERPRINT_JSON = ("default_headers_json", "header_order_json")
_FINGERPRINT_TIMES = ("created_at", "updated_at")


def _fingerprint(row: SourceRow, report: ImportReport) -> tuple:
    return tuple(
        Jsonb(row.json(column))
        if column in _FINGERPRINT_JSON
        else row.timestamp(column)
        if column in _FINGERPRINT_TIMES
        else row.text(column)
        for column in _FINGERPRINT_COLUMNS
    )


_HISTORY_COLUMNS = (
    "id", "current_fingerprint_id", "app_version", "build_number", "chromium_version", "source",
    "manifest_json", "created_at",
)  # fmt: skip


def _history(row: SourceRow, report: ImportReport) -> tuple:
    manifest = row.optional_json("manifest_json")
    return (
        row.text("id"), row.text("current_fingerprint_id"), row.text("app_version"),
        row.text("build_number"), row.optional_text("chromium_version"), row.text("source"),
        None if manifest is None else Jsonb(manifest), row.timestamp("created_at"),
    )  # fmt: skip
