"""``POST /v1/responses``, ``/v1/responses/review`` and ``/v1/responses/compact`` (spec §1.4–§1.5).

Parse → one dispatch call → respond. The body is forwarded transparently: key order and
unknown fields are kept; only the mutations the spec lists are made. Errors are raised as
``ClientFailure`` and answered by ``openai_errors``; the dispatch writes its own ledger entry,
after the response has ended, never before a byte is sent.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from proxy.dispatch.dispatcher import Dispatch
from proxy.dispatch.relay import StreamEnding
from proxy.v1.common import (
    ALLOWED_SUBAGENTS,
    ValidRequest,
    build_dispatch_request,
    event_stream_response,
    model_catalog_or_404,
    resolved,
    validate,
    with_upstream_headers,
)
from proxy.v1.errors import openai_errors
from proxy.v1.idempotency import idempotent
from proxy.v1.request import V1Request, v1_view


def _apply_subagent(body: dict[str, Any], subagent: str | None) -> None:
    if subagent is None:
        return
    metadata = body.get("client_metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        body["client_metadata"] = metadata
    metadata["x-openai-subagent"] = subagent


async def _parse(
    request: V1Request, *, route: str, forced_subagent: str | None
) -> tuple[ValidRequest, Dispatch]:
    valid = await validate(request)
    body = valid.body
    requested_model = body["model"]
    catalog = await model_catalog_or_404(valid, requested_model)
    # The only mutations (spec §1.4). use_websocket is ours, not the upstream's.
    use_websocket = body.pop("use_websocket", None)
    body["model"] = resolved(requested_model, valid)
    header_subagent = request.http.headers.get("x-openai-subagent")
    subagent = forced_subagent or (
        header_subagent if header_subagent in ALLOWED_SUBAGENTS else None
    )
    _apply_subagent(body, subagent)
    stream = body.get("stream") is not False
    if stream:
        body["stream"] = True
    dispatch = Dispatch(
        build_dispatch_request(
            request,
            valid,
            route=route,
            requested_model=requested_model,
            body=body,
            stream=stream,
            catalog=catalog,
            subagent=subagent,
            # 5xx-class failures of a stream come back as a 200 SSE failure event (spec §1.7).
            failures_as_events=stream,
            use_websocket=use_websocket if isinstance(use_websocket, bool) else None,
        )
    )
    return valid, dispatch


async def _serve(
    request: V1Request, *, route: str, forced_subagent: str | None
) -> HttpResponseBase:
    valid, dispatch = await _parse(request, route=route, forced_subagent=forced_subagent)
    if dispatch.request.stream:
        relay = await dispatch.stream()
        ending = StreamEnding()
        return event_stream_response(
            relay.relay(ending), valid.request_id, relay.upstream_headers, ending=ending
        )

    async def complete() -> HttpResponse:
        committed = await dispatch.complete()
        response = JsonResponse(
            committed.response_object, json_dumps_params={"ensure_ascii": False}
        )
        return with_upstream_headers(response, valid.request_id, committed.upstream_headers)

    return await idempotent(
        request.http,
        route=route,
        key_id=valid.client.key_id,
        request_id=valid.request_id,
        body=valid.body,
        produce=complete,
    )


@csrf_exempt
@require_POST
@openai_errors
@v1_view
async def responses(request: V1Request) -> HttpResponseBase:
    return await _serve(request, route="/v1/responses", forced_subagent=None)


@csrf_exempt
@require_POST
@openai_errors
@v1_view
async def responses_review(request: V1Request) -> HttpResponseBase:
    return await _serve(request, route="/v1/responses/review", forced_subagent="review")


@csrf_exempt
@require_POST
@openai_errors
@v1_view
async def responses_compact(request: V1Request) -> HttpResponseBase:
    """One JSON call to the upstream compact endpoint; its JSON comes back verbatim."""
    valid = await validate(request)
    body = valid.body
    requested_model = body["model"]
    catalog = await model_catalog_or_404(valid, requested_model)
    body.pop("stream", None)
    body.pop("use_websocket", None)
    body["model"] = resolved(requested_model, valid)
    dispatch = Dispatch(
        build_dispatch_request(
            request,
            valid,
            route="/v1/responses/compact",
            requested_model=requested_model,
            body=body,
            stream=False,
            catalog=catalog,
        )
    )
    result = await dispatch.compact()
    response = HttpResponse(result.body, content_type="application/json")
    return with_upstream_headers(response, valid.request_id, result.upstream_headers)
