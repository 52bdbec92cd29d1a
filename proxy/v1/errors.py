"""The OpenAI error envelope of ``/v1`` (spec §1.7): ``{"error": {"message", "type", "code"}}``."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse

from proxy.dispatch.failures import ClientError
from proxy.dispatch.sse import DONE_FRAME, failure_event

MISSING_KEY = ClientError(401, "invalid_request_error", "invalid_api_key", "Missing client API key")
INVALID_REQUEST = ClientError(
    400, "invalid_request_error", "invalid_request", "Invalid responses request"
)
MODEL_NOT_FOUND = ClientError(404, "invalid_request_error", "model_not_found", "Model not found")
BODY_TOO_LARGE = ClientError(
    413, "invalid_request_error", "request_too_large", "Request body is larger than 16 MiB"
)
# Shorter wording used inside a stream (spec §1.7).
_STREAM_MESSAGES = {"no_available_accounts": "No active upstream account is available"}


def error_response(error: ClientError, request_id: str) -> HttpResponse:
    if error.raw_body is not None:
        response = HttpResponse(
            error.raw_body, status=error.status, content_type="application/json"
        )
    else:
        response = JsonResponse(error.body(), status=error.status)
    response["x-request-id"] = request_id
    return response


def stream_error_body(error: ClientError) -> bytes:
    """A stream that failed before any byte: one ``response.failed`` event, then [DONE]."""
    message = _STREAM_MESSAGES.get(error.code, error.message)
    return failure_event(error_type=error.error_type, code=error.code, message=message) + DONE_FRAME


INTERNAL = ClientError(
    500, "server_error", "internal_error", "The proxy failed to handle the request"
)


def openai_errors(view):
    """Answer an unexpected failure of a ``/v1`` view in the OpenAI envelope (500), logged,
    instead of Django's HTML page — clients parse JSON. No exception text reaches the client."""
    import functools
    import logging
    import uuid

    logger = logging.getLogger("proxy.v1")

    @functools.wraps(view)
    async def wrapper(request, *args, **kwargs):
        try:
            return await view(request, *args, **kwargs)
        except Exception:
            logger.exception("unexpected failure in %s", request.path)
            request_id = request.headers.get("x-request-id") or f"req_{uuid.uuid4()}"
            return error_response(INTERNAL, request_id[:128])

    return wrapper
