"""What one finished ``/v1`` request leaves behind (spec §7.1): its ``LedgerEntry``.

Built from the dispatch's frozen ``DispatchReport``; ``proxy.ledger.writer`` writes the entries
later, in batches. Facts are telemetry's typed ``UsageFact`` / ``ErrorFact``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from common import clock
from proxy.domain.client_errors import failed_event_status, ops_message
from proxy.domain.dispatch_types import DispatchReport, Served
from proxy.domain.failures import ROTATING_KINDS, FailureKind
from proxy.domain.sse import STREAM_DISCONNECTED_CODE, STREAM_DISCONNECTED_MESSAGE
from proxy.ledger.answer_metadata import answer_metadata, image_tool_declared
from proxy.ledger.attempt_facts import (
    QUOTA_SYNCED_FAILURES,
    counted_usage,
    failure_event,
    failure_metadata,
    masked_detail,
    upstream_request_id,
    usage_tokens,
)
from proxy.services.account_usage import AccountUsageIncrement
from telemetry.services.facts import ErrorFact, UsageFact


@dataclass
class LedgerEntry:
    """Everything one finished request leaves behind."""

    usage: UsageFact | None = None
    errors: list[ErrorFact] = field(default_factory=list)
    account_usage: list[tuple[str, AccountUsageIncrement]] = field(default_factory=list)
    cookies: list[tuple[str, list[dict]]] = field(default_factory=list)
    # (account id, upstream headers) of each 200 answer whose rate-limit headers update the
    # quota: successes, and streams that failed or were cut (spec §4.3; the original synced
    # every answer's headers as it arrived).
    quota_syncs: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    models_etag: str | None = None
    # When the request ended (the ledger's lag is measured from here).
    finished_monotonic: float = field(default_factory=clock.monotonic)


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
        "upstream_request_id": upstream_request_id(headers),
        "latency_ms": moment.latency_ms,
    }
    # Columns of usage_records are not repeated in its metadata (seed §2.7): the effective
    # model is its ``model``/``upstream_model``, so only the ops row carries ``effectiveModel``.
    metadata = {
        **{key: value for key, value in base_metadata.items() if key != "requestedModel"},
        "modelsEtag": headers.get("x-models-etag"),
        "reasoningIncluded": headers.get("x-reasoning-included"),
        "cfRay": headers.get("cf-ray"),
        "accountEmail": served.account.email,
        **answer_metadata(headers, served.websocket_pool),
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
    entry.quota_syncs.append((served.account.id, served.upstream_headers))
    entry.models_etag = served.upstream_headers.get("x-models-etag")
    tokens: dict[str, Any] = usage_tokens(answer.usage)
    entry.usage = UsageFact(
        **columns,
        **tokens,
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
    image_declared = image_tool_declared(request.body)
    for note in report.notes:
        failure = note.failure
        if failure is None:
            continue
        if failure.answered:
            entry.account_usage.append(
                (note.account_id, AccountUsageIncrement(counted_request=True))
            )
        if failure.kind == FailureKind.EMPTY_RESPONSE:
            # An empty completion of a request that asked for an image is a failed image
            # request too (spec §3.6).
            entry.account_usage.append(
                (
                    note.account_id,
                    AccountUsageIncrement(empty_response=True, image_request_failed=image_declared),
                )
            )
        if failure.in_stream and failure.headers and failure.kind in QUOTA_SYNCED_FAILURES:
            entry.quota_syncs.append((note.account_id, failure.headers))
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
                    upstream_request_id=upstream_request_id(failure.headers),
                    metadata={
                        **base_metadata,
                        **failure_metadata(failure, request.model),
                        "errorKind": failure.kind.value,
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
    assert error is not None  # build_entry comes here for a client error only
    # Without an attempt failure the proxy itself refused: no account, or the key's policy.
    failure_class = failure.kind.value if failure else error.code
    last = report.notes[-1] if report.notes else None
    # A stream client gets a server-side failure as a 200 SSE failure event (spec §1.7).
    client_status = 200 if request.failures_as_events and error.status >= 500 else error.status
    metadata = {
        **base_metadata,
        "failed": True,
        "errorKind": failure_class,
        "error": error.message,  # with a failure, its own text (failure_metadata)
        "upstreamCode": failure.code if failure else None,
        "exhaustedCount": report.exhausted_count
        if failure and failure.kind in ROTATING_KINDS
        else None,
        "failureSource": "upstream" if failure else "proxy",
        "effectiveModel": request.model,
    }
    if failure is not None:
        metadata.update(failure_metadata(failure, request.model))
        if failure.kind == FailureKind.RESPONSE_FAILED:
            # The upstream's own words; the client got the original's fixed message.
            metadata["failureEvent"] = failure_event(failure)
            metadata["failureMessage"] = masked_detail(failure.detail) or ""
    entry.errors.append(
        ErrorFact(
            request_id=request.request_id,
            client_api_key_id=request.client_api_key_id,
            route=request.route,
            created_at=moment.now,
            message=ops_message(failure, stream=request.stream),
            provider="openai",
            account_id=last.account_id if last else None,
            model=request.model,
            status_code=error.status,
            client_status_code=client_status,
            upstream_status_code=failure.upstream_status if failure else None,
            transport=report.transport if last else None,
            attempt_index=last.index if last else None,
            failure_class=failure_class,
            response_id=failure.response_id if failure else None,
            upstream_request_id=upstream_request_id(failure.headers) if failure else None,
            latency_ms=moment.latency_ms,
            metadata=metadata,
        )
    )


def _record_compact(entry, report: DispatchReport, base_metadata: dict, moment: _Moment) -> None:
    """A successful ``/v1/responses/compact`` call (transport ``http``): a success like any
    other (spec §1.5, §4.3), its usage from the JSON answer."""
    served = report.served
    assert served is not None  # build_entry comes here for a served compact call only
    payload = served.compact_payload if isinstance(served.compact_payload, dict) else {}
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    response_id = payload.get("id")
    answer = _Answer(
        served=served,
        response_id=response_id if isinstance(response_id, str) else None,
        usage=usage,
    )
    entry.account_usage.append((served.account.id, counted_usage(usage)))
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
    assert progress is not None  # every answer but a compact one has its stream's progress
    terminal = progress.terminal if isinstance(progress.terminal, dict) else {}
    response = served.response_object or terminal.get("response")
    response = response if isinstance(response, dict) else {}
    usage = response.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    answer = _Answer(
        served=served, response_id=progress.response_id or response.get("id"), usage=usage
    )
    entry.account_usage.append(
        (
            served.account.id,
            counted_usage(
                usage, response=response, image_declared=image_tool_declared(request.body)
            ),
        )
    )
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
    # Its rate limits still count (the original synced them when the answer arrived).
    entry.quota_syncs.append((served.account.id, served.upstream_headers))
    upstream_code = failure_event = failure_message = None
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
        upstream_code, failure_event, failure_message = code or None, terminal_event, detail
    else:
        status, source = 502, "proxy"
        failure_class = (
            "invalid_sse" if end.stream_error and "SSE" in end.stream_error else "missing_completed"
        )
        detail = end.stream_error or "ended without response.completed"
        # What the client was sent in its place (proxy.domain.sse.stream_disconnected_event).
        upstream_code, failure_event = STREAM_DISCONNECTED_CODE, "response.failed"
        failure_message = STREAM_DISCONNECTED_MESSAGE + (
            f": {end.stream_error}" if end.stream_error else ""
        )
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
                "effectiveModel": columns["model"],
                "failed": True,
                "errorKind": failure_class,
                "upstreamCode": upstream_code,
                "failureEvent": failure_event,
                "failureMessage": masked_detail(failure_message),
                "failureSource": source,
                "synthetic": end.synthetic_failure,
                "failureDetail": masked_detail(detail) or "",
                "firstTokenMs": progress.first_token_ms,
            },
        )
    )
    return entry
