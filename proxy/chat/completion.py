"""Finished Responses output → the `chat.completion` object, and what both chat paths share."""

from __future__ import annotations

from typing import Any

from proxy.chat.errors import ChatUpstreamFailed
from proxy.chat.output import OutputSummary, chat_usage, finish_reason, summarize_output
from proxy.chat.request import ChatPlan
from proxy.chat.tuple_schema import restore_tuples_in_text

EMPTY_RESPONSE_TEXT = "[Error] Codex returned an empty response. Please retry."
TRUNCATED_MESSAGE = "Upstream stream closed before response.completed"
TRUNCATED_CODE = "stream_disconnected"
FAILED_MESSAGE = "Upstream Codex response failed"
FAILED_CODE = "response_failed"


def build_completion(
    plan: ChatPlan,
    completion_id: str,
    created: int,
    model: str,
    status: str,
    response: dict[str, Any],
    items: list[dict[str, Any]],
) -> dict[str, Any]:
    """Return the `chat.completion` for a finished response (`status` completed/incomplete).

    The message has `content` (null when there is no text; the empty-response text for a
    completed response with nothing to show, legacy rule §1.9), `refusal`, `annotations`
    (URL citations), `reasoning_content` when reasoning was requested and given, `tool_calls`.
    """
    summary = summarize_output(items)
    text = summary.text
    if text and plan.tuple_schema is not None:
        text = restore_tuples_in_text(text, plan.tuple_schema)
    if is_empty(status, summary):
        text = EMPTY_RESPONSE_TEXT
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text or None,
        "refusal": summary.refusal or None,
        "annotations": summary.annotations,
    }
    if plan.reasoning_requested and summary.reasoning:
        message["reasoning_content"] = summary.reasoning
    if summary.tool_calls:
        message["tool_calls"] = summary.tool_calls
    reason = finish_reason(status, incomplete_reason(response), bool(summary.tool_calls))
    completion: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reason}],
    }
    usage = chat_usage(response.get("usage"))
    if usage is not None:
        completion["usage"] = usage
    return completion


def is_empty(status: str, summary: OutputSummary) -> bool:
    """Return whether a response completed with nothing to show (an incomplete one is cut)."""
    return status == "completed" and not (summary.text or summary.refusal or summary.tool_calls)


def incomplete_reason(response: dict[str, Any]) -> str | None:
    """Return `incomplete_details.reason` of a Responses `response`, or None."""
    details = response.get("incomplete_details")
    return details.get("reason") if isinstance(details, dict) else None


def failed_error(error: dict[str, Any]) -> ChatUpstreamFailed:
    """Return the exception for an upstream error object (message/code defaulted if missing)."""
    return ChatUpstreamFailed(
        error.get("message") or FAILED_MESSAGE, error.get("code") or FAILED_CODE, error
    )
