"""``POST /v1/responses`` and ``/v1/responses/review`` (spec §1.4): plain async Django views.

Parse → validate (auth, JSON object, model) → one dispatch → respond. The body is forwarded
transparently: key order and unknown fields are kept; only the mutations listed in the spec
are made. The ledger is written after the response has ended, never before a byte is sent.
"""

from __future__ import annotations

import json
import re
import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from proxy.dispatch import recording
from proxy.dispatch.dispatcher import SAFE_UPSTREAM_HEADERS, Dispatch, DispatchRequest
from proxy.dispatch.failures import ClientError
from proxy.dispatch.upstream_request import read_client_identity
from proxy.models_catalog import BUILTIN_MODEL_IDS, is_recognised, resolve_alias
from proxy.v1.auth import authenticate
from proxy.v1.errors import (
    INVALID_REQUEST,
    MISSING_KEY,
    MODEL_NOT_FOUND,
    error_response,
    stream_error_body,
)

_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
ALLOWED_SUBAGENTS = frozenset({"review", "compact", "memory_consolidation", "collab_spawn"})


def request_id_for(request: HttpRequest) -> str:
    """The client's ``x-request-id`` when well-formed (1–128 of ``[A-Za-z0-9_.-]``), else ours."""
    supplied = request.headers.get("x-request-id")
    if supplied and _REQUEST_ID.match(supplied):
        return supplied
    return f"req_{uuid.uuid4()}"


def _apply_subagent(body: dict, subagent: str | None) -> None:
    if subagent is None:
        return
    metadata = body.get("client_metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        body["client_metadata"] = metadata
    metadata["x-openai-subagent"] = subagent


def _with_headers(response: HttpResponse, request_id: str, upstream_headers: dict[str, str]):
    for name in SAFE_UPSTREAM_HEADERS:
        value = upstream_headers.get(name)
        if value is not None:
            response[name] = value
    response["x-request-id"] = request_id
    return response


async def _serve_responses(request: HttpRequest, *, route: str, forced_subagent: str | None):
    request_id = request_id_for(request)
    if request.method != "POST":
        return error_response(
            ClientError(405, "invalid_request_error", "method_not_allowed", "Use POST"), request_id
        )
    client = await authenticate(request.headers.get("authorization"))
    if client is None:
        return error_response(MISSING_KEY, request_id)
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        return error_response(INVALID_REQUEST, request_id)
    if not isinstance(body, dict):
        return error_response(INVALID_REQUEST, request_id)
    requested_model = body.get("model")
    if not isinstance(requested_model, str) or not requested_model.strip():
        return error_response(INVALID_REQUEST, request_id)
    if not is_recognised(
        requested_model, aliases=client.aliases, catalog_ids=set(BUILTIN_MODEL_IDS)
    ):
        return error_response(MODEL_NOT_FOUND, request_id)

    # The only mutations (spec §1.4). use_websocket is ours, not the upstream's.
    body.pop("use_websocket", None)
    model = resolve_alias(requested_model, client.aliases)
    body["model"] = model
    header_subagent = request.headers.get("x-openai-subagent")
    subagent = forced_subagent or (
        header_subagent if header_subagent in ALLOWED_SUBAGENTS else None
    )
    _apply_subagent(body, subagent)
    stream = body.get("stream") is not False
    if stream:
        body["stream"] = True

    dispatch = Dispatch(
        DispatchRequest(
            request_id=request_id,
            route=route,
            requested_model=requested_model,
            model=model,
            body=body,
            stream=stream,
            scheduler_settings=client.scheduler_settings,
            fingerprint=client.fingerprint,
            client_identity=read_client_identity(
                body, {k.lower(): v for k, v in request.headers.items()}
            ),
            client_api_key_id=client.key_id,
            client_ip=request.META.get("REMOTE_ADDR"),
            user_agent=request.headers.get("user-agent"),
            subagent=subagent,
        )
    )
    if stream:
        return await _stream(dispatch, request_id)
    return await _complete(dispatch, request_id)


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

    response = StreamingHttpResponse(relay(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return _with_headers(response, request_id, outcome.upstream_headers)


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
    return _with_headers(response, request_id, committed.upstream_headers)


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponse:
    return await _serve_responses(request, route="/v1/responses", forced_subagent=None)


@csrf_exempt
async def responses_review(request: HttpRequest) -> HttpResponse:
    return await _serve_responses(request, route="/v1/responses/review", forced_subagent="review")


@csrf_exempt
async def unknown_route(request: HttpRequest, path: str = "") -> HttpResponse:
    """Unknown paths under /v1 and /api answer JSON, not an HTML page (spec §1.1)."""
    return JsonResponse({"code": 40401, "message": "API route not found", "data": None}, status=404)
