"""``GET /v1/models``, ``/v1/models/catalog``, ``/v1/models/{id}``, ``/v1/models/{id}/info``
(spec §1.6). Every route needs a client key."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_GET

from proxy.catalog_cache import current_catalog
from proxy.models_catalog import resolve_alias
from proxy.v1.auth import KeyHolder, authenticate_key
from proxy.v1.common import authenticated
from proxy.v1.errors import MODEL_NOT_FOUND, error_response, openai_errors

CREATED = 1700000000


def _model_object(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": CREATED, "owned_by": "openai"}


def _json(payload: object, request_id: str) -> JsonResponse:
    response = JsonResponse(payload, safe=False)
    response["x-request-id"] = request_id
    return response


def models_route(
    view: Callable[..., Coroutine[Any, Any, HttpResponse]],
) -> Callable[..., Coroutine[Any, Any, HttpResponseBase]]:
    """A GET route of the models API: a JSON 500 on failure, and the view called as
    ``view(request, *args, request_id=…, client=…)`` once the key checks out (else 401,
    raised by ``authenticated``)."""

    @require_GET
    @openai_errors
    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        request_id, client = await authenticated(request, authenticate_key)
        return await view(request, *args, request_id=request_id, client=client, **kwargs)

    return wrapper


@models_route
async def list_models(request: HttpRequest, *, request_id: str, client: KeyHolder) -> HttpResponse:
    """Catalog ids (catalog order, no duplicates), then alias names; a key whose policy
    allows only some models sees only those (and the aliases that resolve to them)."""
    catalog = await current_catalog()
    ids = [entry["id"] for entry in catalog.entries]
    ids += [alias for alias in client.aliases if alias not in ids]
    ids = [model_id for model_id in ids if client.may_use(model_id)]
    return _json(
        {"object": "list", "data": [_model_object(model_id) for model_id in ids]}, request_id
    )


@models_route
async def model_catalog(
    request: HttpRequest, *, request_id: str, client: KeyHolder
) -> HttpResponse:
    entries = (await current_catalog()).entries
    return _json([entry for entry in entries if client.may_use(entry["id"])], request_id)


@models_route
async def model_detail(
    request: HttpRequest, model_id: str, *, request_id: str, client: KeyHolder
) -> HttpResponse:
    """The OpenAI model object echoing the requested id when recognised (aliases too)."""
    catalog = await current_catalog()
    if model_id not in client.aliases and model_id not in catalog.ids:
        return error_response(MODEL_NOT_FOUND, request_id)
    if not client.may_use(model_id):  # the key's policy hides it
        return error_response(MODEL_NOT_FOUND, request_id)
    return _json(_model_object(model_id), request_id)


@models_route
async def model_info(
    request: HttpRequest, model_id: str, *, request_id: str, client: KeyHolder
) -> HttpResponse:
    """The catalog entry of the alias-resolved id."""
    entry = (await current_catalog()).entry(resolve_alias(model_id, client.aliases))
    if entry is None or not client.may_use(model_id):
        return error_response(MODEL_NOT_FOUND, request_id)
    return _json(entry, request_id)
