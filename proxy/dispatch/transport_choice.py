"""Which upstream transport a responses call uses (spec §1.8), and the one fallback.

``use_websocket:false`` (or ``CODEX_WS_ENABLED`` off) → HTTP SSE only; a ``previous_response_id``
→ the WebSocket is required (no fallback); otherwise the WebSocket is preferred and any of its
failures before real output other than an upstream error status or frame (``CodexHTTPError``)
is asked once more over HTTP SSE, on the same account: a socket that cannot be opened or stays
silent (``open_stream``), or a stream that breaks after its first event (``falls_back_to_http``,
used by the attempt strategies). ``store:false`` with a previous id is a connection-local
continuation: only the pooled socket that produced that id may carry it.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from django.conf import settings

from proxy.clients import codex
from proxy.domain.dispatch_types import DispatchRequest
from proxy.domain.failures import AttemptFailure, FailureKind

HTTP_SSE = "http_sse"
WEBSOCKET = "websocket"


class TransportMode(enum.Enum):
    HTTP_ONLY = "http_only"
    WEBSOCKET_REQUIRED = "websocket_required"
    WEBSOCKET_PREFERRED = "websocket_preferred"


def transport_mode(request: DispatchRequest) -> TransportMode:
    if request.use_websocket is False or not settings.CODEX_WS_ENABLED:
        return TransportMode.HTTP_ONLY
    if request.previous_response_id:
        return TransportMode.WEBSOCKET_REQUIRED
    return TransportMode.WEBSOCKET_PREFERRED


def is_connection_local(request: DispatchRequest) -> bool:
    return bool(request.previous_response_id) and request.body.get("store") is False


async def open_stream(
    request: DispatchRequest,
    *,
    account_id: str,
    fields: dict[str, Any],
    headers: list[tuple[str, str]],
    transports_tried: list[str],
    http_only: bool = False,
) -> codex.CodexStream | codex.CodexWebSocketStream:
    """The upstream stream of one attempt (``CodexStream`` or ``CodexWebSocketStream``) for the
    body ``fields`` (encoded only for HTTP: a WebSocket frame is built from the fields); each
    transport used is appended to ``transports_tried``. Raises the Codex client's errors."""
    mode = TransportMode.HTTP_ONLY if http_only else transport_mode(request)
    if mode is not TransportMode.HTTP_ONLY:
        transports_tried.append(WEBSOCKET)
        try:
            return await codex.open_websocket_responses(
                body=fields,
                headers=headers,
                account_id=account_id,
                conversation_id=request.conversation_id,
                previous_response_id=request.previous_response_id,
                connection_local=is_connection_local(request),
                owner=request.client_api_key_id,
            )
        except codex.CodexTransportError:
            if mode is TransportMode.WEBSOCKET_REQUIRED:
                raise
    transports_tried.append(HTTP_SSE)
    return await codex.open_responses(body=encode_body(fields), headers=headers)


def encode_body(fields: dict[str, Any]) -> bytes:
    """A JSON body as the upstream gets it (key order kept, UTF-8, compact)."""
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def falls_back_to_http(request: DispatchRequest, failure: AttemptFailure, transport: str) -> bool:
    """Whether a failed WebSocket attempt is asked once more over HTTP SSE: the stream broke
    (closed, cut, silent) after the first event but before any output, and the request
    prefers rather than requires the WebSocket. Failures opening the socket fell back already
    (``open_stream``); an error frame is a failure of another kind."""
    return (
        transport == WEBSOCKET
        and transport_mode(request) is TransportMode.WEBSOCKET_PREFERRED
        and failure.kind is FailureKind.UPSTREAM_UNAVAILABLE
        and failure.in_stream
    )
