"""The per-request ledger (spec §7.1), written after the response has ended.

Nothing here runs before the last byte reached the client: a finished request hands its
``LedgerEntry`` to the loop's ``LedgerWriter``, which writes batches from a worker thread. A
telemetry failure is logged and never reaches the client.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.utils import timezone

from proxy import redis_keys
from proxy.dispatch.cookies import store_cookies
from proxy.dispatch.failures import ROTATING_KINDS, FailureKind, failed_event_status
from proxy.loop_resources import async_redis
from proxy.quota import passive_quota_sync
from proxy.services.account_usage import (
    AccountUsageIncrement,
    account_usage_add,
    account_usage_add_many,
)
from telemetry.services.ledger import ledger_write_batch, ops_error_log_create, usage_record_create

logger = logging.getLogger(__name__)
FLUSH_INTERVAL_SECONDS = 0.05
MAX_BATCH = 500


@dataclass
class LedgerEntry:
    """Everything one finished request leaves behind."""

    usage: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    account_usage: list[tuple[str, AccountUsageIncrement]] = field(default_factory=list)
    cookies: list[tuple[str, list[dict]]] = field(default_factory=list)
    # (account id, upstream headers) of a success whose rate-limit headers update the quota.
    quota_sync: tuple[str, dict[str, str]] | None = None
    models_etag: str | None = None


class LedgerWriter:
    """Collects finished requests and writes them in batches from one worker thread.

    Every ``FLUSH_INTERVAL_SECONDS`` the pending entries go to the database in one transaction
    (each fact still commits together with its bucket change, seed §5.2) and the account
    counters in one statement of their own. If the batch is rejected (a CHECK, a deleted
    account) its rows are written one by one, so a bad row costs only itself.
    """

    def __init__(self) -> None:
        self._pending: list[LedgerEntry] = []
        self._task: asyncio.Task | None = None

    def submit(self, entry: LedgerEntry) -> None:
        self._pending.append(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._pending:
            await asyncio.sleep(FLUSH_INTERVAL_SECONDS)
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            await write_batch(batch)

    async def flush(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _writer() -> LedgerWriter:
    """This event loop's writer (created on first use; plain data, no I/O)."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = LedgerWriter()
    return writer


def schedule(entry: LedgerEntry) -> None:
    """Hand ``entry`` to this loop's writer; the caller returns (or ends its stream) at once."""
    _writer().submit(entry)


async def await_pending_writes() -> None:
    """Wait until everything submitted so far is written (tests, and graceful shutdown)."""
    await _writer().flush()


async def write_batch(batch: list[LedgerEntry]) -> None:
    try:
        await sync_to_async(_write_batch_in_thread, thread_sensitive=False)(batch)
    except Exception:
        logger.exception("telemetry write failed; the client responses were not affected")
    for entry in batch:
        await _write_extras(entry)


def _write_batch_in_thread(batch: list[LedgerEntry]) -> None:
    now = timezone.now()
    usage_facts = [entry.usage for entry in batch if entry.usage is not None]
    if not settings.TELEMETRY_ENABLED:
        usage_facts = []
    error_facts = [error for entry in batch for error in entry.errors]
    counters = [item for entry in batch for item in entry.account_usage]
    try:
        try:
            if usage_facts or error_facts:
                ledger_write_batch(usage_facts=usage_facts, error_facts=error_facts)
        except Exception:
            logger.warning("ledger batch rejected; writing its rows one by one", exc_info=True)
            for fact in error_facts:
                _logged(ops_error_log_create, fact)
            for fact in usage_facts:
                _logged(usage_record_create, fact)
        try:
            account_usage_add_many(increments=counters, now=now)
        except Exception:
            # An account may have been deleted meanwhile (foreign key): keep the others.
            for account_id, increment in counters:
                _logged(
                    account_usage_add,
                    {"account_id": account_id, "increment": increment, "now": now},
                )
    finally:
        # Return this thread's connection to the pool (no request cycle will do it).
        connection.close()


def _logged(write, arguments: dict) -> None:
    try:
        write(**arguments)
    except Exception:
        logger.warning("telemetry row not written by %s", write.__name__, exc_info=True)


async def _write_extras(entry: LedgerEntry) -> None:
    """The rare parts of an entry: captured cookies, passive quota sync, a new models etag."""
    now = timezone.now()
    for account_id, cookies in entry.cookies:
        try:
            await store_cookies(account_id, cookies, now=now)
        except Exception:
            logger.warning("could not store upstream cookies", exc_info=True)
    if entry.quota_sync is not None:
        account_id, headers = entry.quota_sync
        try:
            await passive_quota_sync(account_id, headers, now=now)
        except Exception:
            logger.warning("passive quota sync failed", exc_info=True)
    if entry.models_etag:
        try:
            await note_models_etag(entry.models_etag)
        except Exception:
            logger.warning("could not check the models etag", exc_info=True)


_last_models_etag: str | None = None


async def note_models_etag(etag: str) -> bool:
    """Queue a model refresh when the upstream announces a models etag not seen before
    (spec §4.5); the process remembers the last one so the usual case costs nothing.
    Returns whether a refresh was queued."""
    global _last_models_etag
    if etag == _last_models_etag:
        return False
    _last_models_etag = etag
    redis = await async_redis.get()
    previous = await redis.set(redis_keys.models_etag(), etag, ex=86400, get=True)
    if previous is not None and previous.decode() == etag:
        return False
    from proxy.tasks import refresh_models_task

    # A short delay lets a burst of answers carrying the same new etag settle (250 ms debounce).
    await sync_to_async(refresh_models_task.apply_async, thread_sensitive=False)(countdown=0.25)
    return True


def _request_summary(body: dict) -> dict[str, Any]:
    input_value = body.get("input")
    tools = body.get("tools")
    return {
        "model": body.get("model"),
        "stream": body.get("stream"),
        "store": body.get("store"),
        "inputType": type(input_value).__name__ if input_value is not None else None,
        "inputItemsCount": len(input_value) if isinstance(input_value, list) else None,
        "toolsCount": len(tools) if isinstance(tools, list) else 0,
        "topLevelFields": sorted(body.keys()),
        "previousResponseIdPresent": bool(body.get("previous_response_id")),
    }


def build_entry(dispatch, *, committed=None, response_object: dict | None = None) -> LedgerEntry:
    """Translate what ``dispatch`` (a finished Dispatch) saw into facts and counters."""
    request = dispatch.request
    now = timezone.now()
    latency = request.elapsed_ms()
    reasoning = request.body.get("reasoning")
    base_metadata: dict[str, Any] = {
        "apiKind": "chat" if request.route == "/v1/chat/completions" else "responses",
        "stream": request.stream,
        "compact": request.route.endswith("/compact"),
        "clientIp": request.client_ip,
        "userAgent": request.user_agent,
        "requestedModel": request.requested_model,
        "reasoningEffort": reasoning.get("effort") if isinstance(reasoning, dict) else None,
        "attemptCount": len(dispatch.notes),
        "attempts": [
            {"index": note.index, "accountId": note.account_id} for note in dispatch.notes
        ],
        "requestSummary": _request_summary(request.body),
    }
    common = {
        "request_id": request.request_id,
        "client_api_key_id": request.client_api_key_id,
        "route": request.route,
    }
    entry = LedgerEntry(cookies=list(dispatch.captured_cookies))

    # Transient failures that moved the request on are logged one by one (spec §7.1); the other
    # rotations (429, 401, ...) show up as account state, not as rows.
    for note in dispatch.notes:
        failure = note.failure
        if failure is None:
            continue
        if failure.answered:
            entry.account_usage.append(
                (note.account_id, AccountUsageIncrement(counted_request=True))
            )
        if failure.kind == FailureKind.EMPTY_RESPONSE:
            entry.account_usage.append(
                (note.account_id, AccountUsageIncrement(empty_response=True))
            )
        is_final = failure is dispatch.final_failure
        if failure.kind == FailureKind.UPSTREAM_UNAVAILABLE and not is_final:
            entry.errors.append(
                {
                    **common,
                    "created_at": now,
                    "message": "v1 responses upstream request failed",
                    "provider": "openai",
                    "account_id": note.account_id,
                    "model": request.model,
                    "status_code": failure.upstream_status or 502,
                    "upstream_status_code": failure.upstream_status,
                    "transport": dispatch.transport,
                    "attempt_index": note.index,
                    "failure_class": failure.kind.value,
                    "latency_ms": latency,
                    "metadata": {
                        **base_metadata,
                        "errorKind": failure.kind.value,
                        "error": failure.short_text(),
                        "failureSource": "upstream",
                    },
                }
            )

    if dispatch.client_error is not None:
        failure = dispatch.final_failure
        failure_class = failure.kind.value if failure else "no_available_accounts"
        error = dispatch.client_error
        last_account = dispatch.notes[-1].account_id if dispatch.notes else None
        entry.errors.append(
            {
                **common,
                "created_at": now,
                "message": "v1 responses dispatch failed",
                "provider": "openai",
                "account_id": last_account,
                "model": request.model,
                "status_code": error.status,
                "client_status_code": error.status,
                "upstream_status_code": failure.upstream_status if failure else None,
                "transport": dispatch.transport if dispatch.notes else None,
                "attempt_index": dispatch.notes[-1].index if dispatch.notes else None,
                "failure_class": failure_class,
                "response_id": failure.response_id if failure else None,
                "latency_ms": latency,
                "metadata": {
                    **base_metadata,
                    "failed": True,
                    "errorKind": failure_class,
                    "error": (failure.short_text() if failure else error.message),
                    "upstreamCode": failure.code if failure else None,
                    "exhaustedCount": dispatch.exhausted_count
                    if failure and failure.kind in ROTATING_KINDS
                    else None,
                    "failureSource": "upstream" if failure else "proxy",
                },
            }
        )
        return entry

    if committed is None:
        return entry
    progress = committed.progress
    account = committed.account
    upstream_headers = committed.upstream_headers
    terminal = progress.terminal if isinstance(progress.terminal, dict) else {}
    response = response_object or (terminal.get("response") if isinstance(terminal, dict) else None)
    response = response if isinstance(response, dict) else {}
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    tokens = {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": input_details.get("cached_tokens"),
        "reasoning_tokens": output_details.get("reasoning_tokens"),
    }
    effective_model = upstream_headers.get("openai-model") or request.model
    fact = {
        **common,
        "created_at": now,
        "provider": "openai",
        "account_id": account.id,
        "model": effective_model,
        "transport": dispatch.transport,
        "attempt_index": committed.attempt_index,
        "response_id": progress.response_id or response.get("id"),
        "upstream_request_id": upstream_headers.get("x-request-id")
        or upstream_headers.get("x-openai-request-id")
        or upstream_headers.get("openai-request-id")
        or upstream_headers.get("request-id"),
        "latency_ms": latency,
    }
    # Columns of usage_records are not repeated in its metadata (seed §2.7).
    metadata = {
        **{key: value for key, value in base_metadata.items() if key != "requestedModel"},
        "modelsEtag": upstream_headers.get("x-models-etag"),
        "reasoningIncluded": upstream_headers.get("x-reasoning-included"),
        "cfRay": upstream_headers.get("cf-ray"),
        "accountEmail": account.email,
    }
    entry.account_usage.append(
        (
            account.id,
            AccountUsageIncrement(
                counted_request=True,
                input_tokens=tokens["input_tokens"] or 0,
                output_tokens=tokens["output_tokens"] or 0,
                cached_tokens=tokens["cached_tokens"] or 0,
                reasoning_tokens=tokens["reasoning_tokens"] or 0,
                total_tokens=usage.get("total_tokens"),
            ),
        )
    )
    failed_badly = dispatch.stream_error or dispatch.synthetic_failure or dispatch.client_cancelled
    terminal_event = progress.terminal_event
    if not failed_badly and terminal_event in ("response.completed", "response.incomplete"):
        incomplete = terminal_event == "response.incomplete"
        entry.quota_sync = (account.id, upstream_headers)
        entry.models_etag = upstream_headers.get("x-models-etag")
        kind_word = "incomplete" if incomplete else "completed"
        message = (
            f"v1 responses stream {kind_word}" if request.stream else f"v1 responses {kind_word}"
        )
        entry.usage = {
            **fact,
            **tokens,
            "message": message,
            "status_code": 200,
            "requested_model": request.requested_model,
            "upstream_model": effective_model,
            "service_tier": request.body.get("service_tier")
            if isinstance(request.body.get("service_tier"), str)
            else None,
            "first_token_ms": progress.first_token_ms,
            "metadata": {**metadata, "completed": not incomplete, "incomplete": incomplete},
        }
        return entry

    # The stream was committed but did not end well: cancelled, cut, or a terminal failure.
    if dispatch.client_cancelled:
        status, failure_class, source = 499, "client_cancelled", "client"
        detail = "the client closed the connection before the response ended"
    elif terminal_event in ("response.failed", "error"):
        error = (
            (response.get("error") or terminal.get("error") or {})
            if isinstance(terminal, dict)
            else {}
        )
        code = str(error.get("code") or "") if isinstance(error, dict) else ""
        status, failure_class, source = failed_event_status(code), "response_failed", "upstream"
        detail = str(error.get("message") or "") if isinstance(error, dict) else ""
    else:
        status, source = 502, "proxy"
        failure_class = (
            "invalid_sse"
            if dispatch.stream_error and "SSE" in dispatch.stream_error
            else "missing_completed"
        )
        detail = dispatch.stream_error or "ended without response.completed"
    entry.errors.append(
        {
            **fact,
            "message": "v1 responses stream failed",
            "status_code": status,
            "client_status_code": 200,
            "failure_class": failure_class,
            "metadata": {
                **metadata,
                "failed": True,
                "errorKind": failure_class,
                "failureSource": source,
                "synthetic": dispatch.synthetic_failure,
                "failureDetail": detail[:200],
                "firstTokenMs": progress.first_token_ms,
            },
        }
    )
    return entry


def build_compact_entry(dispatch, result) -> LedgerEntry:
    """The ledger of a successful ``/v1/responses/compact`` call (transport ``http``)."""
    request = dispatch.request
    entry = build_entry(dispatch)  # transient failures of earlier attempts, if any
    payload = result.payload if isinstance(result.payload, dict) else {}
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    headers = result.upstream_headers
    effective_model = headers.get("openai-model") or request.model
    entry.usage = {
        "created_at": timezone.now(),
        "request_id": request.request_id,
        "client_api_key_id": request.client_api_key_id,
        "route": request.route,
        "provider": "openai",
        "account_id": result.account.id,
        "model": effective_model,
        "requested_model": request.requested_model,
        "upstream_model": effective_model,
        "service_tier": None,
        "status_code": 200,
        "transport": "http",
        "attempt_index": result.attempt_index,
        "response_id": payload.get("id") if isinstance(payload.get("id"), str) else None,
        "upstream_request_id": headers.get("x-request-id"),
        "latency_ms": request.elapsed_ms(),
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": input_details.get("cached_tokens"),
        "reasoning_tokens": output_details.get("reasoning_tokens"),
        "message": "v1 responses compact completed",
        "metadata": {
            "apiKind": "responses",
            "compact": True,
            "stream": False,
            "clientIp": request.client_ip,
            "userAgent": request.user_agent,
            "attemptCount": len(dispatch.notes),
            "attempts": [
                {"index": note.index, "accountId": note.account_id} for note in dispatch.notes
            ],
        },
    }
    entry.account_usage.append(
        (
            result.account.id,
            AccountUsageIncrement(
                counted_request=True,
                input_tokens=usage.get("input_tokens") or 0,
                output_tokens=usage.get("output_tokens") or 0,
                cached_tokens=input_details.get("cached_tokens") or 0,
                reasoning_tokens=output_details.get("reasoning_tokens") or 0,
            ),
        )
    )
    return entry
