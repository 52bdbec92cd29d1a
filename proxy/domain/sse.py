"""Server-sent events as the proxy needs them: frame boundaries, event names, terminal events.

The proxy forwards upstream bytes verbatim; this scanner only watches them go by. It splits
frames on the blank line, reads the ``event:`` name (or the ``type`` of the data when there is
no event line) and parses JSON only for the few events whose content matters (the created
response's id, terminal events with usage). Deltas are recognised by name alone.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from proxy import json_parse

TERMINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
SUCCESS_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
# Events that are "real output": once one is seen, a stream can no longer be retried elsewhere.
OUTPUT_DELTA_EVENTS = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.refusal.delta",
    }
)
OUTPUT_ITEM_EVENTS = frozenset({"response.output_item.added", "response.output_item.done"})
MAX_FRAME_BYTES = 64 * 1024 * 1024
DONE_FRAME = b"data: [DONE]\n\n"


class SSEFrameTooLarge(Exception):
    """One event grew past 64 MiB without ending: the stream is not valid SSE."""


@dataclass
class Frame:
    event: str | None
    data: bytes

    def json(self) -> dict:
        return json_parse.loads(self.data)


def _parse_frame(raw: bytes) -> Frame | None:
    if raw.startswith(b"event: "):
        # The usual shape, "event: <name>\ndata: <json>", without a line-by-line walk.
        newline = raw.find(b"\n")
        if (
            newline > 0
            and raw.startswith(b"data: ", newline + 1)
            and raw.find(b"\n", newline + 1) < 0
        ):
            return Frame(event=raw[7:newline].decode("utf-8", "replace"), data=raw[newline + 7 :])
    event = None
    data_lines = []
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            data_lines.append(line[5:].lstrip(b" "))
    if event is None and not data_lines:
        return None  # a comment or keep-alive
    data = b"\n".join(data_lines)
    if event is None and data and data != b"[DONE]":
        # No event line: the type lives in the JSON. Only then do we parse to learn it.
        try:
            event = json.loads(data).get("type")
        except (ValueError, AttributeError):
            event = None
    return Frame(event=event, data=data)


@dataclass
class SSEScanner:
    """Feed it chunks as they arrive; it returns the complete frames each chunk finished.

    It only reads: the bytes forwarded to the client are the upstream's own. Lines may end in
    CRLF; frames end at a blank line.
    """

    _buffer: bytes = b""
    ends_with_blank_line: bool = True

    def feed(self, chunk: bytes) -> list[Frame]:
        if not chunk:
            return []
        self.ends_with_blank_line = chunk.endswith(b"\n\n") or chunk.endswith(b"\r\n\r\n")
        text = self._buffer + chunk if self._buffer else chunk
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n")
        parts = text.split(b"\n\n")
        self._buffer = parts.pop()
        if len(self._buffer) > MAX_FRAME_BYTES:
            raise SSEFrameTooLarge("an SSE event exceeded 64 MiB")
        frames = []
        for raw in parts:
            frame = _parse_frame(raw)
            if frame is not None:
                frames.append(frame)
        return frames


def frames_of(stream: object, chunk: bytes, scanner: SSEScanner) -> list[Frame]:
    """The complete frames ``chunk`` (just read from ``stream``) finished. A stream that built
    the chunk from events it already knows (the upstream WebSocket's ``chunk_events``) says
    them; an HTTP body is scanned."""
    events = getattr(stream, "chunk_events", None)
    if events is None:
        return scanner.feed(chunk)
    scanner.ends_with_blank_line = True
    return [Frame(event=kind, data=data) for kind, data in events]


def sse_event(event_type: str, payload: dict) -> bytes:
    return f"event: {event_type}\ndata: {json.dumps(payload)}\n\n".encode()


STREAM_DISCONNECTED_CODE = "stream_disconnected"
STREAM_DISCONNECTED_MESSAGE = "Upstream stream closed before response.completed"


def stream_disconnected_event(response_id: str | None, detail: str | None = None) -> bytes:
    """The synthetic ``response.failed`` for an upstream that ended without a terminal event."""
    message = STREAM_DISCONNECTED_MESSAGE
    if detail:
        message = f"{message}: {detail}"
    error = {"type": "server_error", "code": STREAM_DISCONNECTED_CODE, "message": message}
    payload = {
        "type": "response.failed",
        "response": {
            "id": response_id or f"resp_proxy_{uuid.uuid4().hex}",
            "status": "failed",
            "error": error,
        },
        "error": error,
    }
    return sse_event("response.failed", payload)


# The cancellation message the /v1 handler gives a request's view when the server's graceful
# stop ran out of time (proxy/v1/handler.py); the relay then ends the stream with
# ``server_shutdown_event`` instead of just stopping.
SERVER_SHUTDOWN = "server_shutdown"
SERVER_SHUTDOWN_MESSAGE = "The server is shutting down; retry the request"


def server_shutdown_event(response_id: str | None) -> bytes:
    """The ``response.failed`` that ends a stream cut at the graceful stop's deadline."""
    error = {"type": "server_error", "code": SERVER_SHUTDOWN, "message": SERVER_SHUTDOWN_MESSAGE}
    payload = {
        "type": "response.failed",
        "response": {
            "id": response_id or f"resp_proxy_{uuid.uuid4().hex}",
            "status": "failed",
            "error": error,
        },
        "error": error,
    }
    return sse_event("response.failed", payload)


def failure_event(*, error_type: str, code: str, message: str) -> bytes:
    """A ``response.failed`` event standing for a failure found before any upstream byte."""
    error = {"type": error_type, "code": code, "message": message}
    payload = {
        "type": "response.failed",
        "response": {"id": f"resp_proxy_{uuid.uuid4().hex}", "status": "failed", "error": error},
        "error": error,
    }
    return sse_event("response.failed", payload)
