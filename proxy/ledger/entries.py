"""What one finished ``/v1`` request leaves behind (spec §7.1): its ``LedgerEntry``.

Built from the dispatch's frozen ``DispatchReport``; ``proxy.ledger.writer`` writes the entries
later, in batches. Facts are telemetry's typed ``UsageFact`` / ``ErrorFact``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from proxy.dispatch.client_errors import failed_event_status, ops_message
from proxy.dispatch.failures import ROTATING_KINDS, FailureKind
from proxy.dispatch.types import DispatchReport, Served
from proxy.services.account_usage import AccountUsageIncrement
from telemetry.services.facts import ErrorFact, UsageFact


@dataclass
class LedgerEntry:
    """Everything one finished request leaves behind."""

    usage: UsageFact | None = None
    errors: list[ErrorFact] = field(default_factory=list)
    account_usage: list[tuple[str, AccountUsageIncrement]] = field(default_factory=list)
    cookies: list[tuple[str, list[dict]]] = field(default_factory=list)
    # (account id, upstream headers) of a success whose rate-limit headers update the quota.
    quota_sync: tuple[str, dict[str, str]] | None = None
    models_etag: str | None = None
    # When the request ended (the ledger's lag is measured from here).
    finished_monotonic: float = field(default_factory=time.monotonic)


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


def _base_metadata(report: DispatchReport) -> dict[str, Any]:
    """Metadata every row of the request carries (spec §7.1)."""
    request = report.request
    reasoning = request.body.get("reasoning")
    return {
        "apiKind": "chat" if request.route == "/v1/chat/completions" else "responses",
        "stream": request.stream,
        "compact": request.route.endswith("/compact"),
        "clientIp": request.client_ip,
        "userAgent": request.user_agent,
        "requestedModel": request.requested_model,
        "reasoningEffort": reasoning.get("effort") if isinstance(reasoning, dict) else None,
        "attemptCount": len(report.notes),
        "attempts": [{"index": note.index, "accountId": note.account_id} for note in report.notes],
        "requestSummary": _request_summary(request.body),
    }


def _upstream_request_id(headers: dict[str, str]) -> str | None:
    return (
        headers.get("x-request-id")
        or headers.get("x-openai-request-id")
        or headers.get("openai-request-id")
        or headers.get("request-id")
    )


def _tokens(usage: dict) -> dict[str, int | None]:
    """The token columns of a usage object (Responses API shape)."""
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    return {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": input_details.get("cached_tokens"),
        "reasoning_tokens": output_details.get("reasoning_tokens"),
    }


def _counted_usage(usage: dict) -> AccountUsageIncrement:
    """What an answered attempt adds to its account's counters."""
    tokens = _tokens(usage)
    return AccountUsageIncrement(
        counted_request=True,
        input_tokens=tokens["input_tokens"] or 0,
        output_tokens=tokens["output_tokens"] or 0,
        cached_tokens=tokens["cached_tokens"] or 0,
        reasoning_tokens=tokens["reasoning_tokens"] or 0,
        total_tokens=usage.get("total_tokens"),
    )


@dataclass(frozen=True)
class _Moment:
    """When the entry is built: every row of one request shares it."""

    now: datetime
    latency_ms: int


@dataclass(frozen=True)
class _Answer:
    """The served attempt as the ledger reads it: its response id and usage."""

    served: Served
    response_id: str | None
    usage: dict


def _served_columns(report: DispatchReport, answer: _Answer, base_metadata: dict, moment):
    """The columns and metadata shared by the success row and the failed-stream row."""
    request = report.request
    served = answer.served
    headers = served.upstream_headers
    columns = {
        "request_id": request.request_id,
        "client_api_key_id": request.client_api_key_id,
        "route": request.route,
        "created_at": moment.now,
        "provider": "openai",
        "account_id": served.account.id,
        "model": headers.get("openai-model") or request.model,
        "transport": report.transport,
        "attempt_index": served.attempt_index,
        "response_id": answer.response_id,
        "upstream_request_id": _upstream_request_id(headers),
        "latency_ms": moment.latency_ms,
    }
    # Columns of usage_records are not repeated in its metadata (seed §2.7).
    metadata = {
        **{key: value for key, value in base_metadata.items() if key != "requestedModel"},
        "modelsEtag": headers.get("x-models-etag"),
        "reasoningIncluded": headers.get("x-reasoning-included"),
        "cfRay": headers.get("cf-ray"),
        "accountEmail": served.account.email,
    }
    return columns, metadata


def _record_success(
    entry: LedgerEntry,
    report: DispatchReport,
    answer: _Answer,
    base_metadata: dict,
    moment: _Moment,
    *,
    message: str,
    incomplete: bool = False,
    first_token_ms: int | None = None,
) -> None:
    """The usage row of a successful attempt, and what every success triggers: the passive
    quota sync from its rate-limit headers and the models etag check (spec §4.3, §4.5)."""
    request = report.request
    served = answer.served
    columns, metadata = _served_columns(report, answer, base_metadata, moment)
    service_tier = request.body.get("service_tier")
    entry.quota_sync = (served.account.id, served.upstream_headers)
    entry.models_etag = served.upstream_headers.get("x-models-etag")
    entry.usage = UsageFact(
        **columns,
        **_tokens(answer.usage),
        message=message,
        status_code=200,
        requested_model=request.requested_model,
        upstream_model=columns["model"],
        service_tier=service_tier if isinstance(service_tier, str) else None,
        first_token_ms=first_token_ms,
        metadata={**metadata, "completed": not incomplete, "incomplete": incomplete},
    )


def _record_attempt_failures(
    entry: LedgerEntry, report: DispatchReport, base_metadata: dict, moment: _Moment
) -> None:
    """Counters of the attempts that failed, and a row per transient failure that moved the
    request on (spec §7.1); the other rotations (429, 401, ...) show up as account state."""
    request = report.request
    for note in report.notes:
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
        is_final = failure is report.final_failure
        if failure.kind == FailureKind.UPSTREAM_UNAVAILABLE and not is_final:
            entry.errors.append(
                ErrorFact(
                    request_id=request.request_id,
                    client_api_key_id=request.client_api_key_id,
                    route=request.route,
                    created_at=moment.now,
                    message="v1 responses upstream request failed",
                    provider="openai",
                    account_id=note.account_id,
                    model=request.model,
                    status_code=failure.upstream_status or 502,
                    upstream_status_code=failure.upstream_status,
                    transport=report.transport,
                    attempt_index=note.index,
                    failure_class=failure.kind.value,
                    latency_ms=moment.latency_ms,
                    metadata={
                        **base_metadata,
                        "errorKind": failure.kind.value,
                        "error": failure.short_text(),
                        "failureSource": "upstream",
                    },
                )
            )


def _record_dispatch_failure(
    entry: LedgerEntry, report: DispatchReport, base_metadata: dict, moment: _Moment
) -> None:
    """The row of a request no account could serve (the client got ``report.client_error``)."""
    request = report.request
    failure = report.final_failure
    error = report.client_error
    # Without an attempt failure the proxy itself refused: no account, or the key's policy.
    failure_class = failure.kind.value if failure else error.code
    last = report.notes[-1] if report.notes else None
    entry.errors.append(
        ErrorFact(
            request_id=request.request_id,
            client_api_key_id=request.client_api_key_id,
            route=request.route,
            created_at=moment.now,
            message=ops_message(failure),
            provider="openai",
            account_id=last.account_id if last else None,
            model=request.model,
            status_code=error.status,
            client_status_code=error.status,
            upstream_status_code=failure.upstream_status if failure else None,
            transport=report.transport if last else None,
            attempt_index=last.index if last else None,
            failure_class=failure_class,
            response_id=failure.response_id if failure else None,
            latency_ms=moment.latency_ms,
            metadata={
                **base_metadata,
                "failed": True,
                "errorKind": failure_class,
                "error": (failure.short_text() if failure else error.message),
                "upstreamCode": failure.code if failure else None,
                "exhaustedCount": report.exhausted_count
                if failure and failure.kind in ROTATING_KINDS
                else None,
                "failureSource": "upstream" if failure else "proxy",
            },
        )
    )


def _record_compact(entry, report: DispatchReport, base_metadata: dict, moment: _Moment) -> None:
    """A successful ``/v1/responses/compact`` call (transport ``http``): a success like any
    other (spec §1.5, §4.3), its usage from the JSON answer."""
    served = report.served
    payload = served.compact_payload if isinstance(served.compact_payload, dict) else {}
    usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
    answer = _Answer(
        served=served,
        response_id=payload.get("id") if isinstance(payload.get("id"), str) else None,
        usage=usage,
    )
    entry.account_usage.append((served.account.id, _counted_usage(usage)))
    _record_success(
        entry, report, answer, base_metadata, moment, message="v1 responses compact completed"
    )


def build_entry(report: DispatchReport) -> LedgerEntry:
    """Translate what a finished dispatch saw into facts and counters."""
    request = report.request
    moment = _Moment(timezone.now(), request.elapsed_ms())
    base_metadata = _base_metadata(report)
    entry = LedgerEntry(
        cookies=[(account, list(found)) for account, found in report.captured_cookies]
    )
    _record_attempt_failures(entry, report, base_metadata, moment)
    if report.client_error is not None:
        _record_dispatch_failure(entry, report, base_metadata, moment)
        return entry
    served = report.served
    if served is None:
        return entry
    if served.compact_payload is not None:
        _record_compact(entry, report, base_metadata, moment)
        return entry

    progress = served.progress
    terminal = progress.terminal if isinstance(progress.terminal, dict) else {}
    response = served.response_object or terminal.get("response")
    response = response if isinstance(response, dict) else {}
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    answer = _Answer(
        served=served, response_id=progress.response_id or response.get("id"), usage=usage
    )
    entry.account_usage.append((served.account.id, _counted_usage(usage)))
    end = report.end
    failed_badly = (
        end.stream_error or end.synthetic_failure or end.client_cancelled or end.server_shutdown
    )
    terminal_event = progress.terminal_event
    if not failed_badly and terminal_event in ("response.completed", "response.incomplete"):
        incomplete = terminal_event == "response.incomplete"
        kind_word = "incomplete" if incomplete else "completed"
        _record_success(
            entry,
            report,
            answer,
            base_metadata,
            moment,
            message=f"v1 responses stream {kind_word}"
            if request.stream
            else f"v1 responses {kind_word}",
            incomplete=incomplete,
            first_token_ms=progress.first_token_ms,
        )
        return entry

    # The stream was committed but did not end well: cancelled, cut, or a terminal failure.
    if end.client_cancelled:
        status, failure_class, source = 499, "client_cancelled", "client"
        detail = "the client closed the connection before the response ended"
    elif end.server_shutdown:
        status, failure_class, source = 503, "server_shutdown", "proxy"
        detail = "the server's graceful stop ran out of time before the response ended"
    elif terminal_event in ("response.failed", "error"):
        error = response.get("error") or terminal.get("error") or {}
        code = str(error.get("code") or "") if isinstance(error, dict) else ""
        status, failure_class, source = failed_event_status(code), "response_failed", "upstream"
        detail = str(error.get("message") or "") if isinstance(error, dict) else ""
    else:
        status, source = 502, "proxy"
        failure_class = (
            "invalid_sse" if end.stream_error and "SSE" in end.stream_error else "missing_completed"
        )
        detail = end.stream_error or "ended without response.completed"
    columns, metadata = _served_columns(report, answer, base_metadata, moment)
    entry.errors.append(
        ErrorFact(
            **columns,
            message="v1 responses stream failed",
            status_code=status,
            client_status_code=200,
            failure_class=failure_class,
            metadata={
                **metadata,
                "failed": True,
                "errorKind": failure_class,
                "failureSource": source,
                "synthetic": end.synthetic_failure,
                "failureDetail": detail[:200],
                "firstTokenMs": progress.first_token_ms,
            },
        )
    )
    return entry
