"""The proxy's own settings (the OpenAI-compatible proxy over ChatGPT/Codex accounts), read from
the environment like the rest of ``config.settings``, which imports every one of them."""

from config.env import env_bool, env_int, env_str

# The ChatGPT backend; usage and models URLs derive from it (codex-proxy spec §2.1).
CODEX_UPSTREAM_BASE = env_str("CODEX_UPSTREAM_BASE", "https://chatgpt.com/backend-api").rstrip("/")
# The OAuth server: token refresh, authorization-code exchange and the authorize URL (spec §2.1).
OPENAI_AUTH_BASE = env_str("OPENAI_AUTH_BASE", "https://auth.openai.com").rstrip("/")
# Seconds to connect to / wait for the OAuth token endpoint.
OPENAI_AUTH_TIMEOUT_SECONDS = env_int("OPENAI_AUTH_TIMEOUT_SECONDS", 20, minimum=1, maximum=120)
# The admin API's synchronous upstream calls (quota query, connection test) end by this
# deadline, so a hung upstream cannot hold a web worker.
ADMIN_UPSTREAM_DEADLINE_SECONDS = env_int(
    "ADMIN_UPSTREAM_DEADLINE_SECONDS", 60, minimum=1, maximum=600
)
# The Codex Desktop appcast the fingerprint follows (spec §2.1, §2.2).
CODEX_APPCAST_URL = env_str(
    "CODEX_APPCAST_URL", "https://persistent.oaistatic.com/codex-app-prod/appcast.xml"
)
# Beat periods of the upkeep jobs (spec §4.1, §4.4): the token refresh scan and the quota
# recovery pass.
PROXY_REFRESH_SCAN_INTERVAL_SECONDS = env_int(
    "PROXY_REFRESH_SCAN_INTERVAL_SECONDS", 60, minimum=1, maximum=86400
)
PROXY_QUOTA_REFRESH_INTERVAL_SECONDS = env_int(
    "PROXY_QUOTA_REFRESH_INTERVAL_SECONDS", 300, minimum=1, maximum=86400
)
# The scheduled quota read of active accounts (issue 38): every this many seconds, each active
# account whose quota was not read (or changed by a passive sync) within it is read; 0: off.
PROXY_QUOTA_READ_INTERVAL_SECONDS = env_int(
    "PROXY_QUOTA_READ_INTERVAL_SECONDS", 900, minimum=0, maximum=86400
)
# Seconds to establish an upstream connection, and the longest silence between two chunks of an
# upstream stream before it counts as dead (models may think for minutes between events).
CODEX_CONNECT_TIMEOUT_SECONDS = env_int("CODEX_CONNECT_TIMEOUT_SECONDS", 15, minimum=1)
CODEX_READ_TIMEOUT_SECONDS = env_int("CODEX_READ_TIMEOUT_SECONDS", 300, minimum=1)
# The upstream WebSocket (spec §1.8, §2.7, §12). CODEX_WS_ENABLED=0 speaks only HTTP SSE (the
# client's use_websocket is then ignored). Timeouts and the pool's intervals are in seconds.
CODEX_WS_ENABLED = env_bool("CODEX_WS_ENABLED", True)
CODEX_WS_INITIAL_EVENT_TIMEOUT_SECONDS = env_int(
    "CODEX_WS_INITIAL_EVENT_TIMEOUT_SECONDS", 20, minimum=0
)
CODEX_WS_IDLE_TIMEOUT_SECONDS = env_int("CODEX_WS_IDLE_TIMEOUT_SECONDS", 300, minimum=1)
CODEX_WS_POOL_MAX_PER_ACCOUNT = env_int("CODEX_WS_POOL_MAX_PER_ACCOUNT", 8, minimum=0)
CODEX_WS_MAX_AGE_SECONDS = env_int("CODEX_WS_MAX_AGE_SECONDS", 3300, minimum=1)
CODEX_WS_SWEEP_SECONDS = env_int("CODEX_WS_SWEEP_SECONDS", 25, minimum=1)
CODEX_WS_PING_SECONDS = env_int("CODEX_WS_PING_SECONDS", 25, minimum=1)
CODEX_WS_PONG_TIMEOUT_SECONDS = env_int("CODEX_WS_PONG_TIMEOUT_SECONDS", 5, minimum=1)
# The upstream device identity seeded into fingerprints row "current" on first start (spec §2.2,
# §8.2); afterwards the row is the truth.
CODEX_FINGERPRINT = {
    "originator": env_str("CODEX_ORIGINATOR", "Codex Desktop"),
    "app_version": env_str("CODEX_APP_VERSION", "26.519.81530"),
    "build_number": env_str("CODEX_BUILD_NUMBER", "3178"),
    "platform": "darwin",
    "arch": "arm64",
    "chromium_version": "146",
    "user_agent_template": "Codex Desktop/{version} ({platform}; {arch})",
    "default_headers_json": [
        {"name": "Accept-Encoding", "value": "gzip, deflate, br, zstd"},
        {"name": "Accept-Language", "value": "en-US,en;q=0.9"},
        {"name": "sec-ch-ua-mobile", "value": "?0"},
        {"name": "sec-ch-ua-platform", "value": '"macOS"'},
        {"name": "sec-fetch-site", "value": "same-origin"},
        {"name": "sec-fetch-mode", "value": "cors"},
        {"name": "sec-fetch-dest", "value": "empty"},
    ],
    "header_order_json": [
        "authorization",
        "chatgpt-account-id",
        "originator",
        "x-openai-internal-codex-residency",
        "x-client-request-id",
        "x-codex-installation-id",
        "x-codex-turn-state",
        "openai-beta",
        "user-agent",
        "sec-ch-ua",
        "sec-ch-ua-mobile",
        "sec-ch-ua-platform",
        "accept-encoding",
        "accept-language",
        "sec-fetch-site",
        "sec-fetch-mode",
        "sec-fetch-dest",
        "content-type",
        "accept",
        "cookie",
    ],
}
# A concurrency slot not refreshed for this long belongs to a crashed worker and is reclaimed;
# live streams refresh theirs every quarter of it.
SCHEDULER_SLOT_TTL_SECONDS = env_int("SCHEDULER_SLOT_TTL_SECONDS", 300, minimum=1)
# Idempotency-Key on non-stream /v1 calls (proxy/v1/idempotency.py): how long a stored answer
# is replayed, how long a running call's claim holds, and the largest answer stored.
IDEMPOTENCY_TTL_SECONDS = env_int("IDEMPOTENCY_TTL_SECONDS", 24 * 3600, minimum=1)
IDEMPOTENCY_PENDING_SECONDS = env_int("IDEMPOTENCY_PENDING_SECONDS", 600, minimum=1)
IDEMPOTENCY_MAX_STORED_BYTES = env_int("IDEMPOTENCY_MAX_STORED_BYTES", 4 * 1024 * 1024, minimum=1)
# Per-key budgets (proxy/policies/estimate.py): the output tokens a request of a model the pool
# has no history of (no usage row in 7 days) is assumed to produce, for its budget reservation.
KEY_BUDGET_DEFAULT_OUTPUT_TOKENS = env_int(
    "KEY_BUDGET_DEFAULT_OUTPUT_TOKENS", 16384, minimum=0, maximum=10_000_000
)
# How long a request waits for a free slot when every eligible account is at its limit.
SCHEDULER_WAIT_TIMEOUT_SECONDS = env_int("SCHEDULER_WAIT_TIMEOUT_SECONDS", 60, minimum=0)
# Wait-instead-of-fail (proxy/scheduling/eligibility_wait.py): with no account able to serve, wait
# up to this long for one whose cooldown or usage window ends (0: fail at once).
SCHEDULER_ELIGIBILITY_WAIT_SECONDS = env_int("SCHEDULER_ELIGIBILITY_WAIT_SECONDS", 0, minimum=0)
# usage_records are written only when true; ops_error_logs always (spec §7.1).
TELEMETRY_ENABLED = env_bool("TELEMETRY_ENABLED", True)
# How long the ledger collects finished requests before it writes them in one transaction:
# longer means fewer, larger batches under load (measured: bench/README.md), and more rows a
# killed worker can lose.
LEDGER_FLUSH_INTERVAL_MS = env_int("LEDGER_FLUSH_INTERVAL_MS", 200, minimum=1, maximum=5000)
# Request bodies of /v1 may be this large (spec §1.1): proxy/v1/handler.py answers 413 beyond
# it, after the key check (every other route: MAX_REQUEST_BODY_BYTES, config/settings.py).
V1_MAX_BODY_BYTES = 16 * 1024 * 1024
# The bytes of /v1 request bodies (and client WebSocket frames) one process holds at once, from
# the first byte read to the end of the answer (proxy/v1/body_memory.py): a request beyond it is
# 503 server_busy with Retry-After: 1 before its body is read. At least one largest body.
V1_BODY_BYTES_PER_PROCESS = env_int(
    "V1_BODY_BYTES_PER_PROCESS", 256 * 1024 * 1024, minimum=V1_MAX_BODY_BYTES
)
# An account import (POST /api/admin/accounts/import) may carry a large backup: its own cap.
ADMIN_IMPORT_MAX_BODY_BYTES = 16 * 1024 * 1024
