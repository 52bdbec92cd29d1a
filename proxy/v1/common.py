"""What every ``/v1`` view does first: request id, client key, JSON object, model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone

from common import clock
from proxy import json_parse
from proxy.catalog_cache import recognised_catalog
from proxy.dispatch.dispatcher import SAFE_UPSTREAM_HEADERS
from proxy.dispatch.relay import StreamEnding
from proxy.domain.client_errors import ClientError, ClientFailure
from proxy.domain.dispatch_types import DispatchRequest, RequestTiming
from proxy.domain.early_admission import EarlyAdmission
from proxy.domain.upstream_request import SUBAGENTS, read_client_identity
from proxy.ledger import writer as ledger
from proxy.ledger.entries import LedgerEntry
from proxy.metrics.recording import record_refused_before_dispatch
from proxy.models_catalog import Catalog, resolve_alias
from proxy.policies import admission
from proxy.v1.auth import (
    AuthenticatedClient,
    KeyHolder,
    KeyLookupUnavailable,
    KeyRefused,
    authenticate,
)
from proxy.v1.errors import (
    DATABASE_RETRY_AFTER_SECONDS,
    DATABASE_UNAVAILABLE,
    INTERNAL,
    INVALID_REQUEST,
    KEY_REFUSALS,
    MODEL_NOT_FOUND,
    UNENCODABLE_TEXT,
    error_response,
    failure_response,
    request_id_for,
)
from proxy.v1.failures import record_unexpected_failure
from proxy.v1.request import V1Request
from telemetry.services.facts import ErrorFact

logger = logging.getLogger(__name__)

# The client's x-openai-subagent header values that are honoured (client_metadata's too).
ALLOWED_SUBAGENTS = SUBAGENTS
Client = TypeVar("Client", bound=KeyHolder)
Response = TypeVar("Response", bound=HttpResponseBase)


@overload
async def authenticated(request: HttpRequest) -> tuple[str, AuthenticatedClient]: ...
@overload
async def authenticated(
    request: HttpRequest, lookup: Callable[[str | None], Awaitable[Client]]
) -> tuple[str, Client]: ...
async def authenticated(
    request: HttpRequest,
    lookup: Callable[[str | None], Awaitable[KeyHolder]] = authenticate,
) -> tuple[str, KeyHolder]:
    """The request id and the client ``lookup`` verifies from ``Authorization``. Raises
    ClientFailure: 401 for a missing, unknown or disabled key, each with its message (spec
    §1.2, §1.3; ``KEY_REFUSALS``), 503 with ``Retry-After`` when the database could not say."""
    request_id = request_id_for(request)
    try:
        client = await lookup(request.headers.get("authorization"))
    except KeyRefused as refused:
        raise ClientFailure(KEY_REFUSALS[refused.reason]) from None
    except KeyLookupUnavailable:
        ledger.submit(_key_lookup_failure_entry(request, request_id))
        raise ClientFailure(
            DATABASE_UNAVAILABLE, retry_after=DATABASE_RETRY_AFTER_SECONDS
        ) from None
    return request_id, client


def _key_lookup_failure_entry(request: HttpRequest, request_id: str) -> LedgerEntry:
    """The ops_error_logs row of a request refused because its key could not be checked; the
    ledger writer keeps it until the database is back."""
    return LedgerEntry(
        errors=[
            ErrorFact(
                request_id=request_id,
                route=request.path[:200],
                created_at=timezone.now(),
                message="v1 client key lookup failed",
                status_code=DATABASE_UNAVAILABLE.status,
                client_status_code=DATABASE_UNAVAILABLE.status,
                failure_class=DATABASE_UNAVAILABLE.code,
                metadata={
                    "failed": True,
                    "errorKind": DATABASE_UNAVAILABLE.code,
                    "failureSource": "proxy",
                    "clientIp": request.META.get("REMOTE_ADDR"),
                    "userAgent": request.headers.get("user-agent"),
                },
            )
        ]
    )


async def authenticate_before_body(v1: V1Request) -> HttpResponse | None:
    """For a POST route (``proxy/v1/routes.py``), check the client key from the headers alone
    (the body is not read yet) and keep the result for the view; return the 401 (or 500) to
    send instead, else None."""
    request = v1.http
    try:
        v1.authenticated = await authenticated(request)
    except ClientFailure as failure:
        return failure_response(failure, request_id_for(request))
    except Exception as error:
        logger.exception("client key check failed before the body was read")
        record_unexpected_failure(
            error,
            request_id=request_id_for(request),
            route=request.path,
            client_ip=request.META.get("REMOTE_ADDR"),
            user_agent=request.headers.get("user-agent"),
        )
        return error_response(INTERNAL, request_id_for(request))
    return None


async def admit_before_body(v1: V1Request) -> HttpResponse | None:
    """After ``authenticate_before_body``, for a key with a policy: admit the request by it from
    the headers alone (requests and tokens windows, concurrency, budgets —
    ``proxy.domain.early_admission``) and keep the admission for the dispatch to take over;
    return the refusal (429, ``Retry-After``) to send instead of reading the body, else None.
    The allowed models need the body's model: the dispatch checks them."""
    checked = v1.authenticated
    if checked is None:
        return None
    request, (request_id, client) = v1.http, checked
    policy = client.policy
    if policy is None:
        return None
    try:
        outcome = await admission.admit_before_body(policy)
    except Exception:
        # Redis failing: the dispatch's own admission decides (and answers) after the body.
        logger.warning("key policy admission before the body failed", exc_info=True)
        return None
    if isinstance(outcome, EarlyAdmission):
        v1.early_admission = outcome
        return None
    if outcome is None:
        return None
    ledger.submit(_refused_before_body_entry(request, request_id, client.key_id, outcome.error))
    record_refused_before_dispatch(
        request.path_info,
        outcome.error.status,
        client.key_id,
        elapsed_seconds=clock.monotonic() - v1.timing.arrived,
    )
    failure = ClientFailure(outcome.error, retry_after=outcome.retry_after_seconds)
    return failure_response(failure, request_id)


async def give_back_untaken_admission(v1: V1Request) -> None:
    """At the request's end: the admission made before its body, unless a dispatch took it
    over, is given back (a request that never reached its dispatch counts for nothing)."""
    early = v1.early_admission
    if early is not None and early.pending:  # (a dispatch's admission costs nothing here)
        await asyncio.shield(admission.withdraw_if_not_taken(early))


def _refused_before_body_entry(
    request: HttpRequest, request_id: str, key_id: str, error: ClientError
) -> LedgerEntry:
    """The ops_error_logs row of a request its key's policy refused before the body was read
    (as a refusal in the dispatch leaves one, without the model: it was never read)."""
    return LedgerEntry(
        errors=[
            ErrorFact(
                request_id=request_id,
                client_api_key_id=key_id,
                route=request.path[:200],
                created_at=timezone.now(),
                message="v1 key policy refused the request before its body",
                status_code=error.status,
                client_status_code=error.status,
                failure_class=error.code,
                metadata={
                    "failed": True,
                    "errorKind": error.code,
                    "error": error.message,
                    "failureSource": "proxy",
                    "beforeBody": True,
                    "clientIp": request.META.get("REMOTE_ADDR"),
                    "userAgent": request.headers.get("user-agent"),
                },
            )
        ]
    )


def with_upstream_headers(
    response: Response, request_id: str, upstream: dict[str, str]
) -> Response:
    """Copy the safe upstream headers (spec §1.4) and set our request id."""
    for name in SAFE_UPSTREAM_HEADERS:
        value = upstream.get(name)
        if value is not None:
            response[name] = value
    response["x-request-id"] = request_id
    return response


class EventStreamResponse(StreamingHttpResponse):
    """An SSE answer; ``ending`` is its generator's flag for its last item: the /v1 handler
    then sends the events itself and ends the body with that item (``proxy.v1.handler``)."""

    def __init__(self, events: AsyncIterator[bytes], *, ending: StreamEnding | None = None) -> None:
        super().__init__(events, content_type="text/event-stream")
        self.ending = ending


def event_stream_response(
    events: AsyncIterator[bytes],
    request_id: str,
    upstream: dict[str, str],
    *,
    ending: StreamEnding | None = None,
) -> EventStreamResponse:
    """An SSE response of ``events`` (bytes), unbuffered by caches and reverse proxies."""
    response = EventStreamResponse(events, ending=ending)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return with_upstream_headers(response, request_id, upstream)


@dataclass
class ValidRequest:
    request_id: str
    client: AuthenticatedClient
    body: dict[str, Any]
    # The raw body's size (the affinity writer sizes its work by it).
    body_bytes: int = 0


async def validate(v1: V1Request, *, model_field: str = "model") -> ValidRequest:
    """Auth (the key checked before the body, when it was) → body is a JSON object → model a
    non-empty string (spec §1.4 order).

    Returns the parsed request; raises ClientFailure with the error to send.
    """
    request = v1.http
    request_id, client = v1.authenticated or await authenticated(request)
    try:
        # read(), not .body: the body limit is the /v1 handler's (16 MiB), not Django's global
        # DATA_UPLOAD_MAX_MEMORY_SIZE, which guards the other routes.
        raw = request.read()
        body = json_parse.client_loads(raw)
    except json_parse.UnencodableText:
        raise ClientFailure(UNENCODABLE_TEXT) from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: JSON nested deeper than the parser's recursion limit.
        raise ClientFailure(INVALID_REQUEST) from None
    if not isinstance(body, dict):
        raise ClientFailure(INVALID_REQUEST)
    model = body.get(model_field)
    if not isinstance(model, str) or not model.strip():
        raise ClientFailure(INVALID_REQUEST)
    return ValidRequest(request_id=request_id, client=client, body=body, body_bytes=len(raw))


async def model_catalog_or_404(valid: ValidRequest, model: str) -> Catalog:
    """The catalog that recognises ``model``; raises ClientFailure (404) otherwise."""
    catalog = await recognised_catalog(model, valid.client.aliases)
    if catalog is None:
        raise ClientFailure(MODEL_NOT_FOUND)
    return catalog


def build_dispatch_request(
    v1: V1Request,
    valid: ValidRequest,
    *,
    route: str,
    requested_model: str,
    body: dict[str, Any],
    stream: bool,
    catalog: Catalog,
    subagent: str | None = None,
    failures_as_events: bool = False,
    use_websocket: bool | None = None,
) -> DispatchRequest:
    request = v1.http
    headers = {name.lower(): value for name, value in request.headers.items()}
    return DispatchRequest(
        request_id=valid.request_id,
        route=route,
        requested_model=requested_model,
        model=body["model"],
        body=body,
        stream=stream,
        scheduler_settings=valid.client.scheduler_settings,
        fingerprint=valid.client.fingerprint,
        client_identity=read_client_identity(body, headers, client_key_id=valid.client.key_id),
        client_api_key_id=valid.client.key_id,
        client_ip=request.META.get("REMOTE_ADDR"),
        user_agent=request.headers.get("user-agent"),
        subagent=subagent,
        failures_as_events=failures_as_events,
        use_websocket=use_websocket,
        catalog=catalog,
        accounts=valid.client.accounts,
        key_policy=valid.client.policy,
        early_admission=v1.early_admission,
        body_bytes=valid.body_bytes,
        # Stamped by the /v1 handler at the request's arrival (proxy/v1/handler.py).
        timing=v1.timing,
    )


OVERHEAD_HEADER = "x-cpr-overhead-ms"


def stamp_overhead(response: Response, timing: RequestTiming) -> Response:
    """``x-cpr-overhead-ms``: what the proxy added before this answer's first byte."""
    response[OVERHEAD_HEADER] = f"{timing.overhead_ms():.2f}"
    return response


def resolved(model: str, valid: ValidRequest) -> str:
    return resolve_alias(model, valid.client.aliases)
