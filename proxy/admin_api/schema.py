"""The OpenAPI 3 document (drf-spectacular, ``/api/schema/``).

The admin API's views are DRF and describe themselves (``extend_schema`` on each). ``/v1`` is
served by plain async Django views, which drf-spectacular cannot see: ``add_v1_paths`` adds
them by hand, as they behave (the key as ``Authorization: Bearer sk_…``, the OpenAI error
envelope, streaming as ``text/event-stream``). ``only_admin_api`` keeps other DRF views (the
Telegram webhook) out of the document.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

_ENVELOPE_FIELDS: dict[str, serializers.Field] = {
    "code": serializers.IntegerField(help_text="200, or the error's body code"),
    "message": serializers.CharField(),
}


def envelope_of(name: str, fields: dict[str, serializers.Field] | None = None):
    """The success envelope whose ``data`` has ``fields`` (any JSON value when None)."""
    data = (
        inline_serializer(name=f"{name}Data", fields=fields)
        if fields is not None
        else serializers.JSONField()
    )
    return inline_serializer(name=f"{name}Envelope", fields={**_ENVELOPE_FIELDS, "data": data})


ANY_DATA = envelope_of("Any")


def query(name: str, description: str, *, required: bool = False, type_=str) -> OpenApiParameter:
    return OpenApiParameter(
        name, type_, OpenApiParameter.QUERY, required=required, description=description
    )


PAGING_PARAMETERS = [
    query("page", "Page number, from 1 (default 1)", type_=int),
    query("pageSize", "Items per page, 1–200 (default 50)", type_=int),
    query("cursor", "Keyset cursor of the previous page's nextCursor (deep pages)"),
]


def only_admin_api(endpoints: list) -> list:
    """Preprocessing hook: only the admin API's own routes are DRF-described here."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith("/api/admin/")]


_OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": "string", "nullable": True},
                "param": {"type": "string", "nullable": True},
            },
        }
    },
}
_ANY_OBJECT = {"type": "object", "additionalProperties": True}


def _error_responses() -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIError"}}}
    return {
        "400": {"description": "Invalid request", "content": error},
        "401": {"description": "Missing, unknown or disabled client key", "content": error},
        "413": {"description": "Body over 16 MiB", "content": error},
        "429": {"description": "Every account is rate-limited", "content": error},
        "502": {"description": "The upstream failed", "content": error},
        "503": {"description": "No account can serve, or the database is away", "content": error},
    }


def _operation_id(summary: str) -> str:
    return "v1_" + "".join(ch if ch.isalnum() else "_" for ch in summary.lower()).strip("_")


def _streaming_post(summary: str, description: str) -> dict[str, Any]:
    return {
        "post": {
            "operationId": _operation_id(summary),
            "tags": ["v1"],
            "summary": summary,
            "description": description,
            "security": [{"clientKey": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ANY_OBJECT}},
            },
            "responses": {
                "200": {
                    "description": "JSON (``stream: false``) or server-sent events",
                    "content": {
                        "application/json": {"schema": _ANY_OBJECT},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                **_error_responses(),
            },
        }
    }


def _json_get(summary: str, *, path_parameter: bool = False) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": _operation_id(summary),
        "tags": ["v1"],
        "summary": summary,
        "security": [{"clientKey": []}],
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": _ANY_OBJECT}},
            },
            **{
                status: response
                for status, response in _error_responses().items()
                if status in ("401", "404", "503")
            },
        },
    }
    operation["responses"]["404"] = {
        "description": "Unknown model",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIError"}}},
    }
    if path_parameter:
        operation["parameters"] = [
            {"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}
        ]
    return {"get": operation}


V1_PATHS = {
    "/v1/responses": _streaming_post(
        "Responses API",
        "Streamed byte for byte from the upstream by default; ``stream: false`` answers the "
        "terminal response object.",
    ),
    "/v1/responses/review": _streaming_post(
        "Responses API as the review sub-agent", "The same as /v1/responses."
    ),
    "/v1/responses/compact": _streaming_post(
        "Compact a conversation", "One JSON call to the upstream compact endpoint."
    ),
    "/v1/chat/completions": _streaming_post(
        "Chat Completions", "Translated to the Responses API and back (stream and not)."
    ),
    "/v1/models": _json_get("The model list (OpenAI shape)"),
    "/v1/models/catalog": _json_get("The model catalog with plans and aliases"),
    "/v1/models/{model_id}": _json_get("One model", path_parameter=True),
    "/v1/models/{model_id}/info": _json_get("One model's catalog entry", path_parameter=True),
}


def add_v1_paths(result: dict, generator, request, public) -> dict:
    """Postprocessing hook: the /v1 routes, their client-key scheme and error envelope; the
    admin API's two credentials."""
    result.setdefault("paths", {}).update(V1_PATHS)
    components = result.setdefault("components", {})
    components.setdefault("schemas", {})["OpenAIError"] = _OPENAI_ERROR
    schemes = components.setdefault("securitySchemes", {})
    schemes["clientKey"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "A client key (sk_…) made in the admin",
    }
    schemes["adminSession"] = {
        "type": "apiKey",
        "in": "cookie",
        "name": "cpr_admin_session",
        "description": "Set by POST /api/admin/login (shared with the Django admin)",
    }
    schemes["adminApiKey"] = {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "The admin API key (POST /api/admin/settings/admin-api-key/regenerate)",
    }
    public_paths = {"/api/admin/login", "/api/admin/auth/status", "/api/admin/logout"}
    for path, operations in result["paths"].items():
        if not path.startswith("/api/admin/"):
            continue
        for operation in operations.values():
            operation["security"] = (
                [] if path in public_paths else [{"adminSession": []}, {"adminApiKey": []}]
            )
    tags = result.setdefault("tags", [])
    tags.append({"name": "v1", "description": "OpenAI-compatible routes (plain async views)"})
    return result
