"""The OpenAI error envelope of ``/v1`` (spec §1.7): ``{"error": {"message", "type", "code"}}``,
and the request id every ``/v1`` answer carries (spec §1.3)."""

from __future__ import annotations

import functools
import logging
import re
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase

from proxy.chat import ChatRequestInvalid
from proxy.domain.client_errors import NO_ACCOUNTS, ClientError, ClientFailure
from proxy.domain.sse import DONE_FRAME, failure_event
from proxy.domain.upstream_request import InvalidHeaderValue
from proxy.v1.failures import record_unexpected_failure

logger = logging.getLogger("proxy.v1")

# The three 401s of a refused client key (issue 38; the original sends the first for all three,
# spec §1.2): same type and code, a message that says which — never the key itself.
MISSING_KEY = ClientError(401, "invalid_request_error", "invalid_api_key", "Missing client API key")
UNKNOWN_KEY = ClientError(
    401,
    "invalid_request_error",
    "invalid_api_key",
    "Incorrect client API key provided: it is no key of this proxy",
)
DISABLED_KEY = ClientError(
    401,
    "invalid_request_error",
    "invalid_api_key",
    "This client API key is disabled: an operator can enable it again in the console",
)
# By ``proxy.v1.auth.KeyRefusal`` (a StrEnum: its members are these strings).
KEY_REFUSALS = {"missing": MISSING_KEY, "unknown": UNKNOWN_KEY, "disabled": DISABLED_KEY}
INVALID_REQUEST = ClientError(
    400, "invalid_request_error", "invalid_request", "Invalid responses request"
)
MODEL_NOT_FOUND = ClientError(404, "invalid_request_error", "model_not_found", "Model not found")
# The client key could not be checked because the database did not answer: the truth, so the
# client retries (a departure from the original's 401 for every failure, spec §1.2;
# docs/departures.md).
DATABASE_UNAVAILABLE = ClientError(
    503,
    "server_error",
    "database_unavailable",
    "The proxy could not reach its database. Retry the request shortly.",
)
DATABASE_RETRY_AFTER_SECONDS = 1
INVALID_HOST = ClientError(400, "invalid_request_error", "invalid_host", "Invalid Host header")
TOO_DEEP = ClientError(
    400, "invalid_request_error", "invalid_request", "Request JSON is nested too deeply"
)
# Text JSON can spell but no UTF-8 (so no upstream request and no database) can carry: a lone
# UTF-16 surrogate escape such as "\ud800".
UNENCODABLE_TEXT = ClientError(
    400,
    "invalid_request_error",
    "invalid_request",
    "Request JSON holds text that is not valid Unicode (a lone surrogate escape)",
)
INTERNAL = ClientError(
    500, "server_error", "internal_error", "The proxy failed to handle the request"
)
# Shorter wording used inside a stream (spec §1.7) for "no account at all" (not for "all
# accounts busy", which shares its code but not its meaning).
_STREAM_MESSAGES = {NO_ACCOUNTS: "No active upstream account is available"}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def request_id_from(supplied: str | None) -> str:
    """``supplied`` (a client's ``x-request-id``) when well-formed: 1–128 of ``[A-Za-z0-9_.-]``;
    else a fresh ``req_<uuid4>``."""
    if supplied and _REQUEST_ID.match(supplied):
        return supplied
    return f"req_{uuid.uuid4()}"


# Where request_id_for keeps a request's id on Django's request (not an attribute Django knows).
_REQUEST_ID_ATTRIBUTE = "v1_request_id"


def request_id_for(request: HttpRequest) -> str:
    """The request id of ``request`` (its ``x-request-id`` when well-formed, else ours); the
    same for every caller during one request."""
    request_id: str | None = getattr(request, _REQUEST_ID_ATTRIBUTE, None)
    if request_id is None:
        request_id = request_id_from(request.headers.get("x-request-id"))
        setattr(request, _REQUEST_ID_ATTRIBUTE, request_id)
    return request_id


def body_too_large(limit_bytes: int) -> ClientError:
    """413 for a body over ``limit_bytes`` (spec §1.1)."""
    return ClientError(
        413,
        "invalid_request_error",
        "request_too_large",
        f"Request body is larger than {limit_bytes // (1024 * 1024)} MiB",
    )


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
    message = _STREAM_MESSAGES.get(error, error.message)
    return failure_event(error_type=error.error_type, code=error.code, message=message) + DONE_FRAME


def invalid_header_value(header: str) -> ClientError:
    """400 for a body field bound for an upstream header that no header may carry."""
    return ClientError(
        400,
        "invalid_request_error",
        "invalid_header_value",
        f"Invalid value for {header}: control characters or too long",
    )


def failure_response(failure: ClientFailure, request_id: str) -> HttpResponse:
    """The answer of a ``ClientFailure``: the envelope with its status, or (``as_event``) a
    200 SSE failure event."""
    if failure.as_event:
        response = HttpResponse(stream_error_body(failure.error), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["x-request-id"] = request_id
    else:
        response = error_response(failure.error, request_id)
    if failure.retry_after is not None:
        response["Retry-After"] = str(failure.retry_after)
    return response


P = ParamSpec("P")


def openai_errors(
    view: Callable[Concatenate[HttpRequest, P], Coroutine[Any, Any, HttpResponseBase]],
) -> Callable[Concatenate[HttpRequest, P], Coroutine[Any, Any, HttpResponseBase]]:
    """The one handler of a ``/v1`` view's errors: a ``ClientFailure`` becomes its envelope
    (or SSE failure event), a rejected chat request its own envelope; an unexpected failure is
    logged and answered in the OpenAI envelope (500) instead of Django's HTML page — clients
    parse JSON. No exception text reaches the client. Input no upstream request can carry (a
    CRLF bound for a header, JSON too deep to walk) is the client's error: 400."""

    @functools.wraps(view)
    async def wrapper(
        request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs
    ) -> HttpResponseBase:
        try:
            return await view(request, *args, **kwargs)
        except ClientFailure as failure:
            return failure_response(failure, request_id_for(request))
        except ChatRequestInvalid as rejection:
            response = JsonResponse(rejection.envelope(), status=rejection.status_code)
            response["x-request-id"] = request_id_for(request)
            return response
        except InvalidHeaderValue as error:
            return error_response(invalid_header_value(error.header), request_id_for(request))
        except RecursionError:
            return error_response(TOO_DEEP, request_id_for(request))
        except Exception as error:
            logger.exception("unexpected failure in %s", request.path)
            request_id = request_id_for(request)
            record_unexpected_failure(
                error,
                request_id=request_id,
                route=request.path,
                client_ip=request.META.get("REMOTE_ADDR"),
                user_agent=request.headers.get("user-agent"),
            )
            return error_response(INTERNAL, request_id)

    return wrapper
