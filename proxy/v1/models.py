"""``GET /v1/models``, ``/v1/models/catalog``, ``/v1/models/{id}``, ``/v1/models/{id}/info``
(spec §1.6). Every route needs a client key."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from proxy.catalog_cache import current_catalog
from proxy.models_catalog import resolve_alias
from proxy.v1.auth import authenticate
from proxy.v1.common import request_id_for
from proxy.v1.errors import MISSING_KEY, MODEL_NOT_FOUND, error_response, openai_errors

CREATED = 1700000000


def _model_object(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": CREATED, "owned_by": "openai"}


def _json(payload, request_id: str) -> JsonResponse:
    response = JsonResponse(payload, safe=False)
    response["x-request-id"] = request_id
    return response


@require_GET
@openai_errors
async def list_models(request: HttpRequest) -> HttpResponse:
    """Catalog ids (catalog order, no duplicates), then alias names."""
    request_id = request_id_for(request)
    client = await authenticate(request.headers.get("authorization"))
    if client is None:
        return error_response(MISSING_KEY, request_id)
    catalog = await current_catalog()
    ids = [entry["id"] for entry in catalog.entries]
    ids += [alias for alias in client.aliases if alias not in ids]
    return _json(
        {"object": "list", "data": [_model_object(model_id) for model_id in ids]}, request_id
    )


@require_GET
@openai_errors
async def model_catalog(request: HttpRequest) -> HttpResponse:
    request_id = request_id_for(request)
    if await authenticate(request.headers.get("authorization")) is None:
        return error_response(MISSING_KEY, request_id)
    return _json((await current_catalog()).entries, request_id)


@require_GET
@openai_errors
async def model_detail(request: HttpRequest, model_id: str) -> HttpResponse:
    """The OpenAI model object echoing the requested id when recognised (aliases too)."""
    request_id = request_id_for(request)
    client = await authenticate(request.headers.get("authorization"))
    if client is None:
        return error_response(MISSING_KEY, request_id)
    catalog = await current_catalog()
    if model_id not in client.aliases and model_id not in catalog.ids:
        return error_response(MODEL_NOT_FOUND, request_id)
    return _json(_model_object(model_id), request_id)


@require_GET
@openai_errors
async def model_info(request: HttpRequest, model_id: str) -> HttpResponse:
    """The catalog entry of the alias-resolved id."""
    request_id = request_id_for(request)
    client = await authenticate(request.headers.get("authorization"))
    if client is None:
        return error_response(MISSING_KEY, request_id)
    entry = (await current_catalog()).entry(resolve_alias(model_id, client.aliases))
    if entry is None:
        return error_response(MODEL_NOT_FOUND, request_id)
    return _json(entry, request_id)
