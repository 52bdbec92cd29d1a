"""The two write transactions of seed 004 §5.2.

success: ``usage_records`` insert + bucket upsert (success_count, tokens, latencies)
failure: ``ops_error_logs`` insert + bucket upsert (error_count only)

each in one transaction.

Either the fact and its bucket change are both committed or neither is.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from telemetry.models import UNKNOWN_DIMENSION, OpsErrorLog, UsageRecord
from telemetry.services.buckets import (
    BucketIncrement,
    bucket_start_for,
    buckets_add,
    dimension,
    merge_increments,
)
from telemetry.services.facts import (
    DEFAULT_PROVIDER,
    DEFAULT_SUCCESS_STATUS,
    ErrorFact,
    Fact,
    UsageFact,
    fact_values,
)

V1_RESPONSE_KIND = "v1.response"


def event_kind(route: str | None) -> str:
    """The ``kind`` of a fact recorded for ``route``: the only place routes map to kinds (seed
    004 §4.7). kind is the stable event family: every /v1 route variant (responses, review,
    compact, chat completions) converges on ``v1.response`` (codex-proxy spec §7.1), so
    statistics do not break when a route is added or renamed."""
    return V1_RESPONSE_KIND


# Neither a NUL character nor half of a surrogate pair can be stored in PostgreSQL text or jsonb.
# (The bot has its own copy, bots/storable_text.py: the bot and the proxy share no code.)
_UNSTORABLE_CHARACTERS = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` with every string (dict keys included) made storable in PostgreSQL: NUL and
    lone surrogates become U+FFFD. Dicts and lists are copied; other values are returned as
    they are; a fact comes back as a new fact with its text fields and metadata made storable.
    The ledger uses it when the database has refused a batch."""
    if isinstance(value, UsageFact | ErrorFact):
        return type(value)(**{name: storable(item) for name, item in fact_values(value).items()})
    if isinstance(value, str):
        return _UNSTORABLE_CHARACTERS.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def new_usage_record_id() -> str:
    return f"usage_{uuid.uuid4().hex}"


def new_ops_error_log_id() -> str:
    return f"ops_error_{uuid.uuid4().hex}"


def _sample(value: int | None) -> tuple[int, int]:
    """(sum, count) contribution of one latency sample; NULL = not measured, not zero."""
    return (0, 0) if value is None else (value, 1)


def usage_record_create(
    *,
    created_at: datetime,
    account_id: str,
    model: str,
    message: str,
    provider: str = DEFAULT_PROVIDER,
    status_code: int = DEFAULT_SUCCESS_STATUS,
    route: str | None = None,
    request_id: str | None = None,
    client_api_key_id: str | None = None,
    requested_model: str | None = None,
    upstream_model: str | None = None,
    service_tier: str | None = None,
    transport: str | None = None,
    attempt_index: int | None = None,
    response_id: str | None = None,
    upstream_request_id: str | None = None,
    latency_ms: int | None = None,
    first_token_ms: int | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cached_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> UsageRecord:
    """Record one successful request and add it to its bucket, in one transaction
    (``ledger_write_batch`` of one fact). Returns the stored row.

    Raises django.db.IntegrityError (and writes nothing) when a CHECK rejects the row, e.g. a
    status outside 200–399 or a negative token count.
    """
    fact = UsageFact(**locals())
    [record_id], _ = ledger_write_batch(usage_facts=[fact], error_facts=[])
    return UsageRecord.objects.get(pk=record_id)


def ops_error_log_create(
    *,
    created_at: datetime,
    message: str,
    route: str | None = None,
    provider: str | None = None,
    account_id: str | None = None,
    model: str | None = None,
    request_id: str | None = None,
    client_api_key_id: str | None = None,
    status_code: int | None = None,
    client_status_code: int | None = None,
    upstream_status_code: int | None = None,
    transport: str | None = None,
    attempt_index: int | None = None,
    failure_class: str | None = None,
    response_id: str | None = None,
    upstream_request_id: str | None = None,
    latency_ms: int | None = None,
    metadata: dict[str, Any] | None = None,
) -> OpsErrorLog:
    """Record one failure and add 1 to its bucket's error_count, in one transaction
    (``ledger_write_batch`` of one fact). Returns the stored row.

    The error path never touches token or latency columns, and its tier is always
    ``__unknown__`` (failures carry no trustworthy service tier; seed §5.2).
    """
    fact = ErrorFact(**locals())
    _, [record_id] = ledger_write_batch(usage_facts=[], error_facts=[fact])
    return OpsErrorLog.objects.get(pk=record_id)


# --------------------------------------------------------------------------- batches

# The COPY column order of each fact table (also used by the SQLite import).
USAGE_COLUMNS = (
    "id", "request_id", "client_api_key_id", "kind", "route", "provider", "account_id", "model",
    "requested_model", "upstream_model", "service_tier", "status_code", "transport",
    "attempt_index", "response_id", "upstream_request_id", "latency_ms", "first_token_ms",
    "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "message",
    "metadata_json", "created_at",
)  # fmt: skip
ERROR_COLUMNS = (
    "id", "request_id", "client_api_key_id", "kind", "provider", "account_id", "route", "model",
    "status_code", "client_status_code", "upstream_status_code", "transport", "attempt_index",
    "failure_class", "response_id", "upstream_request_id", "latency_ms", "message",
    "metadata_json", "created_at",
)  # fmt: skip


def _row(fact: Fact, record_id: str, columns: tuple[str, ...]) -> tuple:
    """The COPY row of one fact (kind derived from its route; metadata as jsonb)."""
    values = {
        **fact_values(fact),
        "id": record_id,
        "kind": event_kind(fact.route),
        "metadata_json": Jsonb(fact.metadata or {}),
    }
    return tuple(values.get(column) for column in columns)


def _usage_increment(fact: UsageFact) -> BucketIncrement:
    latency = fact.latency_ms
    latency_sum, latency_count = _sample(latency)
    first_token_sum, first_token_count = _sample(fact.first_token_ms)
    return BucketIncrement(
        bucket_start=bucket_start_for(fact.created_at),
        provider=dimension(fact.provider),
        account_id=dimension(fact.account_id),
        model=dimension(fact.model),
        service_tier=dimension(fact.service_tier),
        success_count=1,
        input_tokens=fact.input_tokens or 0,
        output_tokens=fact.output_tokens or 0,
        cached_tokens=fact.cached_tokens or 0,
        first_token_latency_sum=first_token_sum,
        first_token_latency_count=first_token_count,
        latency_sum=latency_sum,
        latency_count=latency_count,
        max_latency_ms=latency or 0,
        min_latency_ms=latency,
    )


def _error_increment(fact: ErrorFact) -> BucketIncrement:
    return BucketIncrement(
        bucket_start=bucket_start_for(fact.created_at),
        provider=dimension(fact.provider),
        account_id=dimension(fact.account_id),
        model=dimension(fact.model),
        service_tier=UNKNOWN_DIMENSION,
        error_count=1,
    )


@transaction.atomic
def ledger_write_batch(
    *, usage_facts: Sequence[UsageFact], error_facts: Sequence[ErrorFact]
) -> tuple[list[str], list[str]]:
    """Write many facts and their bucket changes in ONE transaction (seed 004 §5.2 holds for
    each fact: it and its bucket change commit together or not at all).

    Raises TypeError for anything but ``UsageFact`` / ``ErrorFact`` instances (a dict with a
    misspelt key must not become a NULL column).
    Increments of the same bucket are added up first, so each bucket costs one upsert.
    Returns the new ids (usage, errors). Raises the database error (and writes nothing) if any
    row is rejected.
    """
    for facts, expected in ((usage_facts, UsageFact), (error_facts, ErrorFact)):
        for fact in facts:
            if not isinstance(fact, expected):
                raise TypeError(f"expected {expected.__name__}, got {type(fact).__name__}")
    usage_ids = [new_usage_record_id() for _ in usage_facts]
    error_ids = [new_ops_error_log_id() for _ in error_facts]
    increments = [_usage_increment(fact) for fact in usage_facts]
    increments += [_error_increment(fact) for fact in error_facts]
    # COPY: the cheapest way to land many rows, for the database and for us. Errors are
    # translated to Django's (IntegrityError, ...) like any other statement's.
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw_cursor = cursor.cursor
        if usage_facts:
            with raw_cursor.copy(
                f"copy usage_records ({', '.join(USAGE_COLUMNS)}) from stdin"
            ) as copy:
                for fact, record_id in zip(usage_facts, usage_ids, strict=True):
                    copy.write_row(_row(fact, record_id, USAGE_COLUMNS))
        if error_facts:
            with raw_cursor.copy(
                f"copy ops_error_logs ({', '.join(ERROR_COLUMNS)}) from stdin"
            ) as copy:
                for fact, record_id in zip(error_facts, error_ids, strict=True):
                    copy.write_row(_row(fact, record_id, ERROR_COLUMNS))
    if increments:
        written: list[UsageFact | ErrorFact] = [*usage_facts, *error_facts]
        buckets_add(
            increments=merge_increments(increments),
            now=max(fact.created_at for fact in written),
        )
    return usage_ids, error_ids
