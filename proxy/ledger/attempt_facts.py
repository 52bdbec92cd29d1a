"""What one attempt's answer adds to the ledger (spec §7.1, §7.3): the token columns of its
usage, its account's counters (image requests included), the metadata of a failed attempt's
ops row, and which failed answers may move the quota."""

from __future__ import annotations

from typing import Any

from common.secret_masking import mask_secrets, masked_excerpt
from proxy.domain.failures import AttemptFailure, FailureKind, json_or_none
from proxy.ledger.answer_metadata import answer_metadata, effective_model, image_tokens
from proxy.services.account_usage import AccountUsageIncrement

# How much of the upstream's failure text an ops row keeps.
SHORT_DETAIL = 200
# How much of the upstream's error body an ops row keeps (``upstreamBody``, secrets masked).
UPSTREAM_BODY_EXCERPT = 1000

# In-stream failures whose headers may update the quota: those that leave the account's state
# alone. A rate-limited or quota failure sets its own cooldown (proxy.dispatch.account_effects),
# which a passive sync of the same answer must not undo.
QUOTA_SYNCED_FAILURES = frozenset(
    {
        FailureKind.RESPONSE_FAILED,
        FailureKind.INVALID_SSE,
        FailureKind.UPSTREAM_UNAVAILABLE,
        FailureKind.EMPTY_RESPONSE,
        FailureKind.MODEL_UNSUPPORTED,
    }
)


def upstream_request_id(headers: dict[str, str]) -> str | None:
    return (
        headers.get("x-request-id")
        or headers.get("x-openai-request-id")
        or headers.get("openai-request-id")
        or headers.get("request-id")
    )


def usage_tokens(usage: dict) -> dict[str, int | None]:
    """The token columns of a usage object (Responses API shape)."""
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    return {
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "cached_tokens": input_details.get("cached_tokens"),
        "reasoning_tokens": output_details.get("reasoning_tokens"),
    }


def counted_usage(
    usage: dict, *, response: dict | None = None, image_declared: bool = False
) -> AccountUsageIncrement:
    """What an answered attempt adds to its account's counters: its tokens, and (spec §7.3)
    the image tool's tokens with one image request, successful when the tool was declared and
    produced output tokens, failed when it was declared and did not."""
    tokens = usage_tokens(usage)
    image_input, image_output = image_tokens(response or {})
    return AccountUsageIncrement(
        counted_request=True,
        input_tokens=tokens["input_tokens"] or 0,
        output_tokens=tokens["output_tokens"] or 0,
        cached_tokens=tokens["cached_tokens"] or 0,
        reasoning_tokens=tokens["reasoning_tokens"] or 0,
        total_tokens=usage.get("total_tokens"),
        image_input_tokens=image_input,
        image_output_tokens=image_output,
        image_request=image_declared and image_output > 0,
        image_request_failed=image_declared and image_output == 0,
    )


def failure_metadata(failure: AttemptFailure, request_model: str) -> dict[str, Any]:
    """What a failed attempt's answer contributes to its ops row (spec §7.1): its short
    ``error`` text and, when the upstream answered with a body, ``upstreamBody`` (its first
    1,000 characters, ``upstreamBodyTruncated`` when there was more) — both with secrets
    masked (``common.secret_masking``). The upstream's status is the row's
    ``upstream_status_code`` column."""
    metadata = {
        "effectiveModel": effective_model(failure.headers, request_model),
        **answer_metadata(failure.headers, failure.websocket_pool),
        "error": mask_secrets(failure.short_text()),
    }
    if failure.body:
        excerpt, truncated = masked_excerpt(
            failure.body.decode("utf-8", "replace"), limit=UPSTREAM_BODY_EXCERPT
        )
        metadata["upstreamBody"] = excerpt
        metadata["upstreamBodyTruncated"] = truncated
    return metadata


def masked_detail(text: str | None) -> str | None:
    """An upstream failure message as an ops row keeps it: secrets masked, 200 characters."""
    return mask_secrets(text)[:SHORT_DETAIL] if text else None


def failure_event(failure: AttemptFailure) -> str:
    """The event type of an in-stream failure (``response.failed`` or ``error``)."""
    payload = json_or_none(failure.body) or {}
    kind = payload.get("type")
    return kind if kind in ("response.failed", "error") else "response.failed"
