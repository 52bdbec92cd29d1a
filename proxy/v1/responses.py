"""``POST /v1/responses``, ``/v1/responses/review`` and ``/v1/responses/compact`` (spec §1.4–§1.5).

Parse → validate → one dispatch → respond. The body is forwarded transparently: key order and
unknown fields are kept; only the mutations the spec lists are made. The ledger is written
after the response has ended, never before a byte is sent.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from proxy.dispatch import recording
from proxy.dispatch.dispatcher import Dispatch
from proxy.dispatch.failures import ClientError
from proxy.v1.common import (
    ALLOWED_SUBAGENTS,
    dispatch_request,
    event_stream_response,
    model_catalog_or_404,
    resolved,
    validate,
    with_upstream_headers,
)
from proxy.v1.errors import error_response, openai_errors, stream_error_body


def _apply_subagent(body: dict, subagent: str | None) -> None:
    if subagent is None:
        return
    metadata = body.get("client_metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        body["client_metadata"] = metadata
    metadata["x-openai-subagent"] = subagent


async def _serve(request: HttpRequest, *, route: str, forced_subagent: str | None) -> HttpResponse:
    valid = await validate(request)
    if isinstance(valid, HttpResponse):
        return valid
    body = valid.body
    requested_model = body["model"]
    catalog = await model_catalog_or_404(valid, requested_model)
    if isinstance(catalog, HttpResponse):
        return catalog

    # The only mutations (spec §1.4). use_websocket is ours, not the upstream's.
    body.pop("use_websocket", None)
    body["model"] = resolved(requested_model, valid)
    header_subagent = request.headers.get("x-openai-subagent")
    subagent = forced_subagent or (
        header_subagent if header_subagent in ALLOWED_SUBAGENTS else None
    )
    _apply_subagent(body, subagent)
    stream = body.get("stream") is not False
    if stream:
        body["stream"] = True
    dispatch = Dispatch(
        dispatch_request(
            request,
            valid,
            route=route,
            requested_model=requested_model,
            body=body,
            stream=stream,
            catalog=catalog,
            subagent=subagent,
        )
    )
    if stream:
        return await _stream(dispatch, valid.request_id)
    return await _complete(dispatch, valid.request_id)


async def _stream(dispatch: Dispatch, request_id: str) -> HttpResponse:
    outcome = await dispatch.open_stream()
    if isinstance(outcome, ClientError):
        recording.schedule(recording.build_entry(dispatch))
        if 400 <= outcome.status < 500:
            return error_response(outcome, request_id)
        # 5xx-class failures of a stream come back as a 200 SSE failure event (spec §1.7).
        response = HttpResponse(stream_error_body(outcome), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["x-request-id"] = request_id
        return response

    async def relay():
        try:
            async for chunk in dispatch.relay(outcome):
                yield chunk
        finally:
            recording.schedule(recording.build_entry(dispatch, committed=outcome))

    return event_stream_response(relay(), request_id, outcome.upstream_headers)


async def _complete(dispatch: Dispatch, request_id: str) -> HttpResponse:
    outcome = await dispatch.run_to_completion()
    if isinstance(outcome, ClientError):
        recording.schedule(recording.build_entry(dispatch))
        return error_response(outcome, request_id)
    committed, response_object = outcome
    recording.schedule(
        recording.build_entry(dispatch, committed=committed, response_object=response_object)
    )
    response = JsonResponse(response_object, json_dumps_params={"ensure_ascii": False})
    return with_upstream_headers(response, request_id, committed.upstream_headers)


@csrf_exempt
@require_POST
@openai_errors
async def responses(request: HttpRequest) -> HttpResponse:
    return await _serve(request, route="/v1/responses", forced_subagent=None)


@csrf_exempt
@require_POST
@openai_errors
async def responses_review(request: HttpRequest) -> HttpResponse:
    return await _serve(request, route="/v1/responses/review", forced_subagent="review")


@csrf_exempt
@require_POST
@openai_errors
async def responses_compact(request: HttpRequest) -> HttpResponse:
    """One JSON call to the upstream compact endpoint; its JSON comes back verbatim."""
    valid = await validate(request)
    if isinstance(valid, HttpResponse):
        return valid
    body = valid.body
    requested_model = body["model"]
    catalog = await model_catalog_or_404(valid, requested_model)
    if isinstance(catalog, HttpResponse):
        return catalog
    body.pop("stream", None)
    body.pop("use_websocket", None)
    body["model"] = resolved(requested_model, valid)
    dispatch = Dispatch(
        dispatch_request(
            request,
            valid,
            route="/v1/responses/compact",
            requested_model=requested_model,
            body=body,
            stream=False,
            catalog=catalog,
        )
    )
    outcome = await dispatch.run_compact()
    if isinstance(outcome, ClientError):
        recording.schedule(recording.build_entry(dispatch))
        return error_response(outcome, valid.request_id)
    recording.schedule(recording.build_compact_entry(dispatch, outcome))
    response = HttpResponse(outcome.body, content_type="application/json")
    return with_upstream_headers(response, valid.request_id, outcome.upstream_headers)
