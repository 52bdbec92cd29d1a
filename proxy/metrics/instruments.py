"""The proxy's counters and histograms. With ``PROMETHEUS_MULTIPROC_DIR`` set before
prometheus_client is first imported (``config.run`` sets it for every process it starts), each
process writes its values to files there and any worker's ``/metrics`` adds them up; without
it they live in this process (one worker).

Labels never carry a secret: keys appear by id, accounts by id, models by catalog id.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500)
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

REQUESTS = Counter(
    "cpr_requests",
    "Finished /v1 requests that reached the dispatch, by the status the client got.",
    ["route", "status", "model", "key_id"],
)
REQUEST_DURATION = Histogram(
    "cpr_request_duration_seconds",
    "Time from the request's start to its end (a stream's last byte).",
    ["route"],
    buckets=LATENCY_BUCKETS,
)
FIRST_TOKEN = Histogram(
    "cpr_time_to_first_token_seconds",
    "Time from the request's start to the first output token of the answer.",
    ["route"],
    buckets=FIRST_TOKEN_BUCKETS,
)
UPSTREAM_ATTEMPTS = Counter(
    "cpr_upstream_attempts",
    "Attempts on upstream accounts, by outcome (ok, or the failure kind).",
    ["outcome"],
)
FAILOVERS = Counter(
    "cpr_failovers",
    "Attempts whose failure moved the request on to another account, by reason.",
    ["reason"],
)
TOKEN_REFRESHES = Counter(
    "cpr_token_refreshes",
    "Token refreshes of upstream accounts, by result.",
    ["result"],
)
LEDGER_BATCH_ROWS = Histogram(
    "cpr_ledger_batch_entries",
    "Finished requests written per ledger batch.",
    buckets=BATCH_BUCKETS,
)
LEDGER_LAG = Histogram(
    "cpr_ledger_lag_seconds",
    "Per batch: how long its oldest finished request waited before it was written.",
    buckets=LAG_BUCKETS,
)
