"""The ledger half of ``manage.py import_sqlite`` (seed 004 §6.2, §6.3): the original's v3
``usage_records``, ``ops_error_logs`` and ``usage_time_buckets`` into the v1 ledger.

v3's usage_records mixed successes, failures and noise in one table. Each row goes to exactly
one place (§6.3):

1. a success fact — level not 'error', account and model present, status 200–399 — becomes a
   ``usage_records`` row: provider 'openai', no client key (v3 never recorded it), and the
   fields v1 keeps as columns promoted out of ``metadata_json`` (``usage.*`` first, then the
   top level; camelCase or snake_case) and removed from it;
2. a level 'error' row becomes an ``ops_error_logs`` row (client_status_code unknown);
3. anything else is noise: counted in the report and not imported.

v3's ops_error_logs gain provider 'openai' and no client key; usage_time_buckets become
request_time_buckets (provider 'openai', empty dimension → ``__unknown__``, success_count =
max(request_count − error_count, 0), min_latency_ms 0 → NULL). Everything is written with COPY
inside the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypeGuard

from psycopg.types.json import Jsonb

from telemetry.models import UNKNOWN_DIMENSION
from telemetry.services.buckets import COLUMNS as BUCKET_COLUMNS
from telemetry.services.buckets import BucketIncrement, merge_increments
from telemetry.services.ledger import ERROR_COLUMNS, USAGE_COLUMNS
from telemetry.services.legacy_sqlite import (
    ImportReport,
    ProgressFactory,
    SourceRow,
    copy_rows,
    source_count,
    source_rows,
)

PROVIDER = "openai"

# v3 columns of usage_records (0001) and ops_error_logs (0003).
_V3_USAGE_COLUMNS = (
    "id", "request_id", "kind", "level", "account_id", "route", "model", "status_code",
    "transport", "attempt_index", "upstream_status_code", "failure_class", "response_id",
    "upstream_request_id", "latency_ms", "message", "metadata_json", "created_at",
)  # fmt: skip
_V3_ERROR_COLUMNS = (
    "id", "request_id", "kind", "account_id", "route", "model", "status_code",
    "client_status_code", "upstream_status_code", "transport", "attempt_index", "failure_class",
    "response_id", "upstream_request_id", "latency_ms", "message", "metadata_json", "created_at",
)  # fmt: skip
_V3_BUCKET_COLUMNS = (
    "bucket_start", "account_id", "model", "service_tier", "request_count", "error_count",
    "input_tokens", "output_tokens", "cached_tokens", "first_token_latency_sum",
    "first_token_latency_count", "latency_sum", "latency_count", "max_latency_ms",
    "min_latency_ms", "updated_at",
)  # fmt: skip

# Promoted to columns (seed §6.3): column -> the metadata keys v3 may have used for it.
_PROMOTED_TEXT = {
    "requested_model": ("requestedModel", "requested_model"),
    "upstream_model": ("upstreamModel", "upstream_model"),
    "service_tier": ("serviceTier", "service_tier"),
}
_PROMOTED_COUNT = {
    "first_token_ms": ("firstTokenMs", "first_token_ms"),
    "input_tokens": ("inputTokens", "input_tokens"),
    "output_tokens": ("outputTokens", "output_tokens"),
    "cached_tokens": ("cachedTokens", "cached_tokens"),
    "reasoning_tokens": ("reasoningTokens", "reasoning_tokens"),
}
# Removed from a success's metadata: the usage object, every promoted key, and v3's copies of
# values that are columns already (seed §2.7: a promoted field is never written twice).
_STRIPPED_KEYS = frozenset(
    {
        "usage",
        *(key for keys in _PROMOTED_TEXT.values() for key in keys),
        *(key for keys in _PROMOTED_COUNT.values() for key in keys),
        "route",
        "statusCode",
        "status_code",
        "transport",
        "attemptIndex",
        "attempt_index",
        "responseId",
        "response_id",
        "upstreamRequestId",
        "upstream_request_id",
        "openaiRequestId",
    }
)

# dataclasses.astuple deep-copies every value: far too slow for a bucket history.
_BUCKET_FIELDS = BUCKET_COLUMNS[:-1]  # every column but updated_at, in BucketIncrement's order


def _bucket_values(increment: BucketIncrement) -> tuple:
    return tuple(getattr(increment, name) for name in _BUCKET_FIELDS)


NOISE = "usage_records noise (no account, no model or no 200-399 status)"


def _present(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and value.strip() != ""


def _first_text(places: list[dict], keys: tuple[str, ...]) -> str | None:
    for place in places:
        for key in keys:
            value = place.get(key)
            if _present(value):
                return value.strip()
    return None


def _first_count(places: list[dict], keys: tuple[str, ...]) -> int | None:
    """The first non-negative integer found (JSON true/false are not counts)."""
    for place in places:
        for key in keys:
            value = place.get(key)
            if type(value) is int and value >= 0:
                return value
    return None


def promote(metadata: Any) -> tuple[dict[str, Any], Any]:
    """(the promoted columns, what stays in metadata) for a v3 success's metadata."""
    if not isinstance(metadata, dict):
        return {}, metadata
    usage = metadata.get("usage")
    places = [usage, metadata] if isinstance(usage, dict) else [metadata]
    columns: dict[str, Any] = {
        column: _first_text(places, keys) for column, keys in _PROMOTED_TEXT.items()
    }
    columns |= {column: _first_count(places, keys) for column, keys in _PROMOTED_COUNT.items()}
    remaining = {key: value for key, value in metadata.items() if key not in _STRIPPED_KEYS}
    return columns, remaining


def is_success_fact(row: SourceRow) -> bool:
    values = row.values
    status = values["status_code"]
    return (
        values["level"] != "error"
        and _present(values["account_id"])
        and _present(values["model"])
        and type(status) is int
        and 200 <= status <= 399
    )


def _success_row(row: SourceRow) -> tuple:
    columns, metadata = promote(row.json("metadata_json"))
    values = row.values
    return (
        row.text("id"), row.optional_text("request_id"), None, row.text("kind"),
        row.optional_text("route"), PROVIDER, values["account_id"], values["model"],
        columns.get("requested_model"), columns.get("upstream_model"),
        columns.get("service_tier"), values["status_code"], row.optional_text("transport"),
        row.optional_integer("attempt_index"), row.optional_text("response_id"),
        row.optional_text("upstream_request_id"), row.optional_integer("latency_ms"),
        columns.get("first_token_ms"), columns.get("input_tokens"),
        columns.get("output_tokens"), columns.get("cached_tokens"),
        columns.get("reasoning_tokens"), row.text("message"), Jsonb(metadata),
        row.timestamp("created_at"),
    )  # fmt: skip


def _error_row(row: SourceRow, *, client_status_code: int | None) -> tuple:
    return (
        row.text("id"), row.optional_text("request_id"), None, row.text("kind"), PROVIDER,
        row.optional_text("account_id"), row.optional_text("route"), row.optional_text("model"),
        row.optional_integer("status_code"), client_status_code,
        row.optional_integer("upstream_status_code"), row.optional_text("transport"),
        row.optional_integer("attempt_index"), row.optional_text("failure_class"),
        row.optional_text("response_id"), row.optional_text("upstream_request_id"),
        row.optional_integer("latency_ms"), row.text("message"),
        Jsonb(row.json("metadata_json")), row.timestamp("created_at"),
    )  # fmt: skip


def _with_progress(rows: Iterator, progress) -> Iterator:
    done = 0
    for row in rows:
        yield row
        done += 1
        if done % 5000 == 0:
            progress.update(5000)
    progress.update(done % 5000)
    progress.close()


def import_ledger_tables(*, source, report: ImportReport, progress: ProgressFactory) -> None:
    """Import v3's three ledger tables from the open ``source`` (sqlite3) into the v1 ledger.

    Runs inside the caller's transaction. Raises ImportDataError on a value v3 could not have
    written or a row v1 rejects."""
    _import_usage_records(source, report, progress)
    _import_ops_error_logs(source, report, progress)
    _import_buckets(source, report, progress)


def _import_usage_records(source, report: ImportReport, progress: ProgressFactory) -> None:
    # Two passes (COPY streams one table at a time); v3 indexes level.
    noise = 0

    def successes() -> Iterator[tuple]:
        nonlocal noise
        for row in source_rows(
            source, "usage_records", _V3_USAGE_COLUMNS, "where level <> 'error'", report=report
        ):
            if is_success_fact(row):
                yield _success_row(row)
            else:
                noise += 1

    total = source_count(source, "usage_records", "where level <> 'error'")
    bar = progress("usage_records (successes)", total)
    report.imported["usage_records"] += copy_rows(
        "usage_records", USAGE_COLUMNS, _with_progress(successes(), bar)
    )
    report.dropped[NOISE] += noise

    errors = (
        _error_row(row, client_status_code=None)
        for row in source_rows(
            source, "usage_records", _V3_USAGE_COLUMNS, "where level = 'error'", report=report
        )
    )
    bar = progress(
        "usage_records (errors)", source_count(source, "usage_records", "where level = 'error'")
    )
    report.imported["ops_error_logs"] += copy_rows(
        "ops_error_logs", ERROR_COLUMNS, _with_progress(errors, bar)
    )


def _import_ops_error_logs(source, report: ImportReport, progress: ProgressFactory) -> None:
    rows = (
        _error_row(row, client_status_code=row.optional_integer("client_status_code"))
        for row in source_rows(source, "ops_error_logs", _V3_ERROR_COLUMNS, report=report)
    )
    bar = progress("ops_error_logs", source_count(source, "ops_error_logs"))
    report.imported["ops_error_logs"] += copy_rows(
        "ops_error_logs", ERROR_COLUMNS, _with_progress(rows, bar)
    )


def _dimension(value: Any, report: ImportReport, column: str) -> str:
    if _present(value):
        return value.strip()
    report.normalized[f"request_time_buckets: empty {column} -> {UNKNOWN_DIMENSION}"] += 1
    return UNKNOWN_DIMENSION


def _bucket(row: SourceRow, report: ImportReport) -> tuple[BucketIncrement, datetime]:
    requests, errors = row.integer("request_count"), row.integer("error_count")
    minimum = row.integer("min_latency_ms")
    if minimum == 0:
        # v3 stored "no sample" as 0; v1 stores NULL (a real 0 ms sample is indistinguishable).
        report.normalized["request_time_buckets: min_latency_ms 0 -> NULL"] += 1
    increment = BucketIncrement(
        bucket_start=row.timestamp("bucket_start"),
        provider=PROVIDER,
        account_id=_dimension(row.values["account_id"], report, "account_id"),
        model=_dimension(row.values["model"], report, "model"),
        service_tier=_dimension(row.values["service_tier"], report, "service_tier"),
        success_count=max(requests - errors, 0),
        error_count=errors,
        input_tokens=row.integer("input_tokens"),
        output_tokens=row.integer("output_tokens"),
        cached_tokens=row.integer("cached_tokens"),
        first_token_latency_sum=row.integer("first_token_latency_sum"),
        first_token_latency_count=row.integer("first_token_latency_count"),
        latency_sum=row.integer("latency_sum"),
        latency_count=row.integer("latency_count"),
        max_latency_ms=row.integer("max_latency_ms"),
        min_latency_ms=minimum or None,
    )
    return increment, row.timestamp("updated_at")


def _import_buckets(source, report: ImportReport, progress: ProgressFactory) -> None:
    """Buckets are few (90 days × 96 slots × accounts × models at most) and are merged in
    memory: after normalisation two v3 keys may meet (``''`` and ``' '``, or one instant
    written two ways), and they are added up as the live upsert would."""
    increments: list[BucketIncrement] = []
    updated_at: dict[tuple, datetime] = {}
    for row in source_rows(source, "usage_time_buckets", _V3_BUCKET_COLUMNS, report=report):
        increment, updated = _bucket(row, report)
        key = _bucket_values(increment)[:5]
        updated_at[key] = max(updated, updated_at.get(key, updated))
        increments.append(increment)
    merged = merge_increments(increments)
    if len(merged) < len(increments):
        report.normalized["request_time_buckets: merged after normalisation"] += len(
            increments
        ) - len(merged)
    rows = ((*values, updated_at[values[:5]]) for values in map(_bucket_values, merged))
    bar = progress("usage_time_buckets", len(merged))
    report.imported["request_time_buckets"] += copy_rows(
        "request_time_buckets", BUCKET_COLUMNS, _with_progress(rows, bar)
    )
