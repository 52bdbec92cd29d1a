"""Building SQLite databases of the original (schema v3, or older) for the import tests.

The schema comes from tests/proxy/fixtures/sqlite_v3/ (the original's migrations 0001–0003,
restated); rows are inserted with plain SQL, exactly as the original stored them: RFC 3339
text timestamps, 0/1 booleans, JSON as text.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher

FIXTURES = Path(__file__).parent / "fixtures" / "sqlite_v3"
MIGRATIONS = (
    (1, "initial", "0001_initial.sql"),
    (2, "rename_rotation_strategies", "0002_rename_rotation_strategies.sql"),
    (3, "ops_error_logs", "0003_ops_error_logs.sql"),
)


def build_source(path: Path, *, version: int = 3) -> sqlite3.Connection:
    """A new database at ``path`` migrated (and recorded) up to ``version``, like the original's
    ``database.rs`` leaves it; returns a connection to fill it."""
    database = sqlite3.connect(path)
    database.execute("pragma foreign_keys = on")
    database.executescript((FIXTURES / "schema_migrations.sql").read_text())
    for number, name, filename in MIGRATIONS[:version]:
        database.executescript((FIXTURES / filename).read_text())
        database.execute(
            "insert into schema_migrations (version, name, applied_at) values (?, ?, ?)",
            (number, name, "2026-01-01T00:00:00.000Z"),
        )
    database.commit()
    return database


def insert(database: sqlite3.Connection, table: str, **values: Any) -> None:
    """One row; dicts and lists are stored as JSON text, as the original did."""
    values = {
        column: json.dumps(value) if isinstance(value, dict | list) else value
        for column, value in values.items()
    }
    columns = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    database.execute(f"insert into {table} ({columns}) values ({marks})", list(values.values()))


def insert_unchecked(database: sqlite3.Connection, table: str, **values: Any) -> None:
    """A row that breaks one of the source's own CHECKs (SQLite can be told to skip them, and
    old rows written before a CHECK existed look like this)."""
    database.execute("pragma ignore_check_constraints = on")
    insert(database, table, **values)
    database.execute("pragma ignore_check_constraints = off")


# ------------------------------------------------------------------ the import tests' source

ADMIN_PASSWORD = "the original admin passphrase"
# The original's argon2 crate defaults (Argon2id v19, m=19456, t=2, p=1) in PHC form.
ORIGINAL_HASH = PasswordHasher(memory_cost=19456, time_cost=2, parallelism=1).hash(ADMIN_PASSWORD)
NOW = datetime.now(UTC).replace(microsecond=0)
# A 15-minute slot two days ago: inside every retention window.
SLOT = datetime.fromtimestamp(int((NOW - timedelta(days=2)).timestamp()) // 900 * 900, tz=UTC)
OLD_SLOT = SLOT - timedelta(days=60)  # older than the facts' 30 days, younger than 90


def z(moment: datetime) -> str:
    """How the original's Rust code wrote a time: RFC 3339, nanoseconds, Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def plus8(moment: datetime) -> str:
    """The same instant with a +08:00 offset (China time, which the original displays)."""
    return (moment + timedelta(hours=8)).strftime("%Y-%m-%dT%H:%M:%S+08:00")


def fill_source(database) -> None:
    """Every rule of seed §6.2/§6.3 with a row of its own."""
    # fmt: off
    t0 = SLOT + timedelta(minutes=1)
    insert(database, "admin_users", id="admin_1", password_hash=ORIGINAL_HASH,
           created_at=z(t0), updated_at=plus8(t0))
    insert(database, "admin_sessions", id="sess_1", user_id="admin_1", expires_at=z(NOW),
           created_at=z(t0))
    insert(database, "client_api_keys", id="key_on", name="laptop", prefix="sk_abc123def4",
           key="sk_abc123def4full", label="codex", enabled=1, created_at=z(t0),
           last_used_at=plus8(t0 + timedelta(hours=1)))
    insert(database, "client_api_keys", id="key_off", name="old", prefix="sk_zzz",
           key="sk_zzzfull", label=None, enabled=0, created_at=z(t0), last_used_at=None)
    insert(database, "runtime_settings", id=1, model_aliases_json={"fast": "gpt-5.4-mini"},
           refresh_margin_seconds=1800, refresh_concurrency=4, max_concurrent_per_account=5,
           request_interval_ms=0, rotation_strategy="quota_reset_priority",
           admin_api_key="admin-0123456789abcdef", updated_at=z(t0))
    insert(database, "accounts", id="acc_active", email="a@example.com",
           chatgpt_account_id="org-a", chatgpt_user_id="user-a", label="A", plan_type="pro",
           access_token="at-a", refresh_token="rt-a", access_token_expires_at=plus8(NOW),
           next_refresh_at=z(NOW - timedelta(hours=1)), status="active",
           quota_json={"primary": {"used_percent": 12}}, quota_fetched_at=z(t0),
           quota_limit_reached=1, quota_verify_required=0, quota_cooldown_until=z(NOW),
           cloudflare_cooldown_until=None, added_at=z(t0), updated_at=z(t0))
    insert(database, "accounts", id="acc_refreshing", email=None, chatgpt_account_id="org-r",
           chatgpt_user_id=None, label=None, plan_type="plus", access_token="at-r",
           refresh_token="rt-r", access_token_expires_at=z(t0), next_refresh_at=z(t0),
           status="refreshing", quota_json=None, quota_fetched_at=None, quota_limit_reached=0,
           quota_verify_required=1, quota_cooldown_until=None,
           cloudflare_cooldown_until=plus8(NOW), added_at=z(t0 + timedelta(seconds=1)),
           updated_at=z(t0))
    insert(database, "account_refresh_leases", account_id="acc_refreshing", owner="instance-1",
           expires_at=z(NOW), updated_at=z(t0))
    insert(database, "account_usage", account_id="acc_active", request_count=7,
           empty_response_count=1, input_tokens=700, output_tokens=70, cached_tokens=7,
           reasoning_tokens=3, total_tokens=770, image_input_tokens=0, image_output_tokens=0,
           image_request_count=0, image_request_failed_count=0, window_request_count=2,
           window_input_tokens=200, window_output_tokens=20, window_cached_tokens=2,
           window_image_input_tokens=0, window_image_output_tokens=0,
           window_image_request_count=0, window_image_request_failed_count=0,
           window_started_at=z(t0), window_reset_at=plus8(NOW), limit_window_seconds=18000,
           last_used_at=z(t0))
    for model in ("gpt-5.4", "gpt-5.4-mini"):
        insert(database, "account_model_usage", account_id="acc_active", model=model,
               request_count=1, error_count=0, input_tokens=1, output_tokens=1,
               cached_tokens=0, last_used_at=z(t0))
    for cookie_id, expiry in (
        ("ck_rfc3339", "2027-03-01T12:00:00+02:00"),
        ("ck_rfc2822", "Wed, 21 Oct 2026 07:28:00 GMT"),
        ("ck_garbage", "next tuesday"),
        ("ck_session", None),
    ):
        insert(database, "account_cookies", id=cookie_id, account_id="acc_active",
               domain=".chatgpt.com", name=cookie_id, value=f"value-{cookie_id}", path="/",
               expires_at=expiry, updated_at=z(t0))
    insert(database, "fingerprints", id="current", originator="Codex Desktop",
           app_version="26.519.81530", build_number="3178", platform="darwin", arch="arm64",
           chromium_version="138.0.7204.251", user_agent_template="Codex/{version}",
           default_headers_json={"accept-language": "en-US"},
           header_order_json=["user-agent", "accept"], source="appcast", created_at=z(t0),
           updated_at=z(t0))
    insert(database, "fingerprint_update_history", id="fph_1", current_fingerprint_id="current",
           app_version="26.519.81530", build_number="3178", chromium_version=None,
           source="appcast", manifest_json={"version": "26.519.81530"}, created_at=z(t0))
    insert(database, "fingerprint_update_history", id="fph_2", current_fingerprint_id="current",
           app_version="26.500.1", build_number="3100", chromium_version="137.0",
           source="config_seed", manifest_json=None, created_at=z(t0 - timedelta(days=1)))
    insert(database, "model_plan_snapshots", plan_type="pro", models_json=["gpt-5.4"],
           fetched_at=z(t0))
    insert(database, "session_affinities", response_id="resp_aff", account_id="acc_active",
           conversation_id="conv", turn_state=None, instructions_hash=None, input_tokens=3,
           function_call_ids_json=[], variant_hash=None, expires_at=z(NOW), created_at=z(t0))

    def usage(record_id, *, level, account_id, model, status_code, metadata, minutes, **extra):
        row = {
            "id": record_id, "request_id": f"req_{record_id}", "kind": "v1.response",
            "level": level, "account_id": account_id, "route": "/v1/responses", "model": model,
            "status_code": status_code, "transport": "http", "attempt_index": 0,
            "upstream_status_code": None, "failure_class": None,
            "response_id": f"resp_{record_id}", "upstream_request_id": None, "latency_ms": 900,
            "message": f"message {record_id}", "metadata_json": metadata,
            "created_at": z(SLOT + timedelta(minutes=minutes)),
        }
        insert(database, "usage_records", **{**row, **extra})

    # 1. successes: camelCase with a usage object, ...
    usage("s_camel", level="info", account_id="acc_active", model="gpt-5.4", status_code=200,
          minutes=2, metadata={
              "usage": {"inputTokens": 100, "outputTokens": 20, "cachedTokens": 40,
                        "reasoningTokens": 5, "totalTokens": 120},
              "requestedModel": "fast", "upstreamModel": "gpt-5.4-mini", "serviceTier": "priority",
              "firstTokenMs": 310, "route": "/v1/responses", "apiKind": "responses",
              "transport": "http", "statusCode": 200, "responseId": "resp_s_camel",
              "clientIp": "203.0.113.9", "reasoningEffort": "high"})
    # ... snake_case at the top level, the usage object winning where both are given, ...
    usage("s_snake", level="warn", account_id="acc_active", model="gpt-5.4", status_code=399,
          minutes=3, latency_ms=0, metadata={
              "usage": {"input_tokens": 10},
              "input_tokens": 99, "output_tokens": 4, "cached_tokens": 0,
              "reasoning_tokens": 1, "requested_model": " gpt-5.4 ", "service_tier": "",
              "first_token_ms": -1, "userAgent": "codex-cli"})
    # ... and one whose usage object holds an invalid count (the top level is used then).
    usage("s_fallback", level="debug", account_id="acc_refreshing", model="gpt-5.4-mini",
          status_code=201, minutes=20, latency_ms=None, metadata={
              "usage": {"outputTokens": -3, "inputTokens": "12"}, "outputTokens": 7})
    # 2. failures (level 'error') -> ops_error_logs
    usage("e_rate", level="error", account_id="acc_active", model="gpt-5.4", status_code=429,
          minutes=4, upstream_status_code=429, failure_class="rate_limited",
          upstream_request_id="up_1", metadata={"retryAfter": 30,
          "usage": {"inputTokens": 5}})
    usage("e_early", level="error", account_id=None, model=None, status_code=None, minutes=5,
          transport=None, attempt_index=None, response_id=None, latency_ms=None,
          metadata={"reason": "no accounts"})
    # 3. noise: no account, a blank model, no terminal success status
    usage("n_no_account", level="info", account_id=None, model="gpt-5.4", status_code=200,
          minutes=6, metadata={})
    usage("n_blank_model", level="debug", account_id="acc_active", model="  ", status_code=200,
          minutes=6, metadata={})
    usage("n_server_error", level="info", account_id="acc_active", model="gpt-5.4",
          status_code=500, minutes=6, metadata={})
    usage("n_no_status", level="warn", account_id="acc_active", model="gpt-5.4",
          status_code=None, minutes=6, metadata={})

    insert(database, "ops_error_logs", id="ops_v3", request_id="req_ops", kind="v1.response",
           account_id="acc_active", route="/v1/responses", model="gpt-5.4", status_code=502,
           client_status_code=502, upstream_status_code=503, transport="http",
           attempt_index=1, failure_class="upstream_unavailable", response_id=None,
           upstream_request_id="up_2", latency_ms=1500, message="upstream 503",
           metadata_json={"body": "busy"}, created_at=z(SLOT + timedelta(minutes=7)))

    def bucket(start: str, account_id: str, model: str, tier: str, **counters) -> None:
        row = {
            "request_count": 0, "error_count": 0, "input_tokens": 0, "output_tokens": 0,
            "cached_tokens": 0, "first_token_latency_sum": 0, "first_token_latency_count": 0,
            "latency_sum": 0, "latency_count": 0, "max_latency_ms": 0, "min_latency_ms": 0,
            "updated_at": z(SLOT + timedelta(minutes=14)),
        }
        insert(database, "usage_time_buckets", bucket_start=start, account_id=account_id,
               model=model, service_tier=tier, **{**row, **counters})

    bucket(z(OLD_SLOT), "acc_active", "gpt-5.4", "priority", request_count=10, error_count=2,
           input_tokens=1000, output_tokens=100, cached_tokens=10, first_token_latency_sum=900,
           first_token_latency_count=3, latency_sum=8000, latency_count=8, max_latency_ms=2000,
           min_latency_ms=120)
    bucket(z(OLD_SLOT), "", "", "", request_count=1, error_count=3)
    # One instant written two ways, same dimensions once normalised: merged into one bucket.
    bucket(z(SLOT), "acc_active", "gpt-5.4", "", request_count=2, input_tokens=555,
           latency_sum=100, latency_count=2, max_latency_ms=60, min_latency_ms=40)
    bucket(plus8(SLOT), "acc_active", "gpt-5.4", "   ", request_count=1, error_count=1,
           input_tokens=5, latency_sum=30, latency_count=1, max_latency_ms=30,
           min_latency_ms=30)
    database.commit()
    # fmt: on
