"""The ChatGPT backend as a client (spec §2): every call the project makes to it.

``build_headers`` is the one header builder (fingerprint order), ``open_responses`` /
``compact`` / ``usage`` / ``models`` the calls, ``open_websocket_responses`` the responses call
over the pooled upstream WebSocket (``websocket.py``, ``ws_pool.py``); failures are
``CodexTransportError`` and ``CodexHTTPError`` (with ``permanent``). Imports nothing from the
request path (``dispatch/``).
"""

from proxy.clients.codex.errors import (
    CodexContinuationUnavailable,
    CodexError,
    CodexHTTPError,
    CodexTransportError,
)
from proxy.clients.codex.headers import (
    COMPACT_OMITTED_HEADERS,
    Call,
    Credentials,
    FingerprintHeaders,
    build_headers,
    render_fingerprint,
)
from proxy.clients.codex.transport import (
    ERROR_BODY_READ_CAP,
    SAME_ACCOUNT_5XX_RETRIES,
    CodexAnswer,
    CodexStream,
    compact,
    compact_url,
    models,
    models_urls,
    open_responses,
    responses_url,
    usage,
    usage_urls,
)
from proxy.clients.codex.websocket import (
    CodexWebSocketStream,
    open_websocket_responses,
    websocket_url,
)

__all__ = [
    "COMPACT_OMITTED_HEADERS",
    "ERROR_BODY_READ_CAP",
    "SAME_ACCOUNT_5XX_RETRIES",
    "Call",
    "CodexAnswer",
    "CodexContinuationUnavailable",
    "CodexError",
    "CodexHTTPError",
    "CodexStream",
    "CodexTransportError",
    "CodexWebSocketStream",
    "Credentials",
    "FingerprintHeaders",
    "build_headers",
    "compact",
    "compact_url",
    "models",
    "models_urls",
    "open_responses",
    "open_websocket_responses",
    "render_fingerprint",
    "responses_url",
    "usage",
    "usage_urls",
    "websocket_url",
]
