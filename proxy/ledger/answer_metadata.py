"""What an upstream answer tells the ledger beyond its events (spec §2.4, §7.1, §7.3): the
rate-limit and trace headers it carried, the model that served it, how the WebSocket pool
served it, and the image generation it did.

Headers are the lower-cased dict of the answer (the HTTP response, or the WebSocket's upgrade
answer with the ``response.metadata`` / ``codex.rate_limits`` frames folded in). The pairs keep
the answer's order and are stored as ``[[name, value], …]`` — the original's shape.
"""

from __future__ import annotations

import re
from typing import Any

# Trace headers kept for a support ticket, in the original's order (the first request id is
# also the row's ``upstream_request_id``; ``cf-ray`` is repeated as ``cfRay``).
TRACE_HEADERS = (
    "x-request-id",
    "x-oai-request-id",
    "x-openai-request-id",
    "openai-request-id",
    "request-id",
    "cf-ray",
)
# Spec §2.4: the quota windows, credits, plan and limit flags a Codex answer reports.
_RATE_LIMIT_NAME = re.compile(
    r"^(?:x-codex-credits-.+"
    r"|x-codex-plan-type|x-codex-promo-message"
    r"|x-[a-z0-9-]+-(?:primary|secondary)-"
    r"(?:used-percent|window-minutes|reset-at|reset-after-seconds)"
    r"|x-[a-z0-9-]+-(?:limit-name|allowed|limit-reached))$"
)
# At most this many pairs per row, and this long a value: headers are the upstream's to send.
MOST_PAIRS = 64
LONGEST_VALUE = 512


def is_rate_limit_header(name: str) -> bool:
    name = name.lower()
    return (
        name == "retry-after"
        or "ratelimit" in name
        or "rate-limit" in name
        or bool(_RATE_LIMIT_NAME.match(name))
    )


def _pairs(headers: dict[str, str], names) -> list[list[str]]:
    return [[name, str(headers[name])[:LONGEST_VALUE]] for name in names if headers.get(name)][
        :MOST_PAIRS
    ]


def rate_limit_header_pairs(headers: dict[str, str]) -> list[list[str]]:
    """The rate-limit headers of an answer (``rateLimitHeaders``)."""
    return _pairs(headers, [name for name in headers if is_rate_limit_header(name)])


def trace_header_pairs(headers: dict[str, str]) -> list[list[str]]:
    """The upstream's trace headers of an answer (``upstreamTraceHeaders``)."""
    return _pairs(headers, TRACE_HEADERS)


def answer_metadata(
    headers: dict[str, str], websocket_pool: dict[str, str] | None
) -> dict[str, Any]:
    """The §7.1 metadata an answer contributes to its row: ``rateLimitHeaders``,
    ``upstreamTraceHeaders``, ``cfRay`` and ``websocketPool``, each only when it has a value
    (the original leaves an empty list out)."""
    found: dict[str, Any] = {}
    rate_limits = rate_limit_header_pairs(headers)
    if rate_limits:
        found["rateLimitHeaders"] = rate_limits
    traces = trace_header_pairs(headers)
    if traces:
        found["upstreamTraceHeaders"] = traces
    if headers.get("cf-ray"):
        found["cfRay"] = headers["cf-ray"][:LONGEST_VALUE]
    if websocket_pool:
        found["websocketPool"] = dict(websocket_pool)
    return found


def effective_model(headers: dict[str, str], resolved_model: str) -> str:
    """The model that served the request: the upstream's ``openai-model``, else the one the
    request resolved to (spec §7.1)."""
    return headers.get("openai-model") or resolved_model


def image_tool_declared(body: dict) -> bool:
    """Whether the request declared the ``image_generation`` tool (spec §7.3)."""
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("type") == "image_generation" for tool in tools
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def image_tokens(response: dict) -> tuple[int, int]:
    """(input, output) tokens of the image tool, from ``response.tool_usage.image_gen``."""
    tool_usage = response.get("tool_usage")
    image = tool_usage.get("image_gen") if isinstance(tool_usage, dict) else None
    if not isinstance(image, dict):
        return 0, 0
    return _count(image.get("input_tokens")), _count(image.get("output_tokens"))
