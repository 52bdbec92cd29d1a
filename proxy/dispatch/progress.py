"""What the frames of an upstream stream say, as they go by (spec §3.6): the response id, the
first token, real output, the terminal event — and, before any output, a rotatable failure."""

from __future__ import annotations

import contextlib
from typing import Any

from proxy.domain.dispatch_types import DispatchRequest, StreamProgress
from proxy.domain.failures import AttemptFailure, classify_failed_event, history_error_code
from proxy.domain.sse import (
    OUTPUT_DELTA_EVENTS,
    OUTPUT_ITEM_EVENTS,
    SUCCESS_TERMINAL_EVENTS,
    TERMINAL_EVENTS,
    Frame,
)


def observe(
    frames: list[Frame], progress: StreamProgress, request: DispatchRequest
) -> AttemptFailure | None:
    """Update ``progress`` from new frames (first token timed from ``request``'s start). Before
    output, a rotatable terminal failure is returned so the caller can move to the next
    account (or, for a ``previous_response_id``, a history error to recover)."""
    for frame in frames:
        event = frame.event
        if frame.data == b"[DONE]":
            progress.done_seen = True
            continue
        if event == "response.created" and progress.response_id is None:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                progress.response_id = frame.json()["response"]["id"]
        elif event in OUTPUT_DELTA_EVENTS:
            progress.output_seen = True
            if progress.first_token_ms is None:
                progress.first_token_ms = max(1, request.elapsed_ms())
        elif event in OUTPUT_ITEM_EVENTS:
            progress.output_seen = True
        elif event in TERMINAL_EVENTS:
            try:
                terminal = frame.json()
            except ValueError:
                terminal = {}
            terminal = terminal if isinstance(terminal, dict) else {}
            progress.terminal_event = event
            progress.terminal = terminal
            response = terminal.get("response")
            if isinstance(response, dict) and response.get("id"):
                progress.response_id = response["id"]
            if event not in SUCCESS_TERMINAL_EVENTS and not progress.output_seen:
                failure = classify_failed_event(terminal)
                # A continuation's history error is still held back too: the dispatch may
                # recover it by replay (spec §5.3–§5.4).
                if failure.rotates or (
                    request.previous_response_id and history_error_code(failure) is not None
                ):
                    failure.in_stream = True
                    return failure
    return None


def is_empty_completion(response: dict[str, Any]) -> bool:
    """Completed with no items, no text and zero output tokens (spec §3.6), and not incomplete."""
    if response.get("status") == "incomplete":
        return False
    output = response.get("output") or []
    usage = response.get("usage") or {}
    return not output and not (usage.get("output_tokens") or 0)
