"""The admin API's one answer shape (codex-proxy spec §6.1).

Success: HTTP 200 ``{"code": 200, "message": "OK", "data": …}``. Errors: ``{"code": <body code>,
"message": …, "data": null}`` with the HTTP status of the body code. Every answer carries
``Cache-Control: no-store``. Views raise ``ApiError`` (or let DRF raise its own exceptions);
``admin_exception_handler`` turns both into the envelope, and anything unexpected into 50001
(logged with its traceback, never with the request's body or credentials).
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from proxy.v1.errors import request_id_for

logger = logging.getLogger(__name__)


class BodyCode(enum.IntEnum):
    """Body codes of spec §6.1; the HTTP status is the first three digits."""

    MALFORMED_JSON = 40000
    BAD_REQUEST = 40001
    INVALID_TIME_RANGE = 40002
    INVALID_MODEL_SOURCE = 40003
    INVALID_ENDPOINT_SOURCE = 40004
    SESSION_REQUIRED = 40101
    INVALID_CREDENTIALS = 40102
    INVALID_API_KEY = 40103
    # Not in the original: a cookie-authenticated write from another origin (docs/departures.md).
    CROSS_ORIGIN = 40301
    NOT_FOUND = 40401
    METHOD_NOT_ALLOWED = 40501
    # Not in the original: a body over the route's size limit (the ASGI layer answers 413 before
    # Django sees it; this is the same answer where Django's own limit is met first).
    BODY_TOO_LARGE = 41301
    CONFLICT = 40901
    TOO_MANY_LOGIN_ATTEMPTS = 42901
    SETTINGS_PERSIST_FAILED = 50000
    INTERNAL = 50001
    USAGE_RECORD_ACCOUNTS_FAILED = 50002
    BAD_GATEWAY = 50201

    @property
    def http_status(self) -> int:
        return self.value // 100


class ApiError(Exception):
    """An error answer; ``message`` is shown to the operator and must hold no secret."""

    def __init__(
        self,
        code: BodyCode,
        message: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.headers = headers or {}


def bad_request(message: str) -> ApiError:
    return ApiError(BodyCode.BAD_REQUEST, message)


def not_found(message: str = "Not found") -> ApiError:
    return ApiError(BodyCode.NOT_FOUND, message)


def ok(data: Any) -> Response:
    return Response({"code": 200, "message": "OK", "data": data})


def error_body(code: BodyCode, message: str) -> dict:
    return {"code": int(code), "message": message, "data": None}


def _first_validation_message(detail: Any, path: str = "") -> str:
    """``field: message`` of the first error of a DRF ValidationError detail."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            return _first_validation_message(value, f"{path}.{name}" if path and name else name)
        return "Invalid request"
    if isinstance(detail, list):
        for index, value in enumerate(detail):
            if isinstance(value, dict | list):
                return _first_validation_message(value, f"{path}[{index}]")
            return _first_validation_message(value, path)
        return "Invalid request"
    return f"{path}: {detail}" if path else str(detail)


def _envelope_for(error: Exception) -> tuple[BodyCode, str, dict[str, str]]:
    if isinstance(error, ApiError):
        return error.code, error.message, error.headers
    if isinstance(error, RequestDataTooBig):
        return BodyCode.BODY_TOO_LARGE, "The request body is too large", {}
    if isinstance(error, exceptions.ParseError):
        return BodyCode.MALFORMED_JSON, "Malformed JSON body", {}
    if isinstance(error, exceptions.UnsupportedMediaType):
        return BodyCode.MALFORMED_JSON, "The body must be JSON (Content-Type: application/json)", {}
    if isinstance(error, exceptions.ValidationError):
        return BodyCode.BAD_REQUEST, _first_validation_message(error.detail), {}
    if isinstance(error, exceptions.NotAuthenticated):
        return BodyCode.SESSION_REQUIRED, "Admin session required", {}
    if isinstance(error, exceptions.AuthenticationFailed):
        return BodyCode.INVALID_API_KEY, "Invalid admin API key", {}
    if isinstance(error, exceptions.MethodNotAllowed):
        return BodyCode.METHOD_NOT_ALLOWED, "Method not allowed", {}
    if isinstance(error, Http404 | exceptions.NotFound):
        return BodyCode.NOT_FOUND, "Not found", {}
    if isinstance(error, exceptions.Throttled):
        return BodyCode.TOO_MANY_LOGIN_ATTEMPTS, "Too many requests", {}
    if isinstance(error, exceptions.APIException):
        return BodyCode.BAD_REQUEST, str(error.detail), {}
    raise error


def admin_exception_handler(error: Exception, context: dict) -> Response | None:
    """DRF's exception handler for the admin views: the envelope for every failure."""
    try:
        code, message, headers = _envelope_for(error)
    except Exception:
        view = context.get("view")
        logger.exception("admin API %s failed", type(view).__name__ if view else "view")
        code, message, headers = BodyCode.INTERNAL, "Internal server error", {}
    response = Response(error_body(code, message), status=code.http_status)
    for name, value in headers.items():
        response[name] = value
    if code.http_status == 405 and isinstance(error, exceptions.MethodNotAllowed):
        allowed = getattr(context.get("view"), "allowed_methods", None)
        if allowed:
            response["Allow"] = ", ".join(allowed)
    return response


def admin_bad_request(request: HttpRequest, exception: Exception) -> JsonResponse | None:
    """Django's 400 (``handler400``: a foreign Host header, another suspicious request) for a
    path under /api/admin, in the envelope; None for every other path (Django's own page)."""
    if not request.path.startswith("/api/admin/"):
        return None
    message = "Invalid Host header" if isinstance(exception, DisallowedHost) else "Bad request"
    response = JsonResponse(error_body(BodyCode.BAD_REQUEST, message), status=400)
    response["Cache-Control"] = "no-store"
    return response


def unknown_admin_route(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any other path under /api/admin: the envelope's 404 (with no-store, like every answer),
    echoing the request id as every unknown /api path does (spec §1.3)."""
    response = JsonResponse(error_body(BodyCode.NOT_FOUND, "API route not found"), status=404)
    response["Cache-Control"] = "no-store"
    response["x-request-id"] = request_id_for(request)
    return response
