"""Responses stream events → `chat.completion.chunk` frames and the `chat.completion` object.

One `ChatStreamTranslator` per request is fed every upstream event. For a streaming client it
returns the chunks to send; for any client it can build the final `chat.completion` at the end.

Stream shape (the view writes each dict as `data: <json>\\n\\n`, then `data: [DONE]\\n\\n`):

* Structural events (`response.created`, `…part.added`…) produce nothing. The role chunk
  (`delta: {"role": "assistant", "content": ""}`, or `"content": null` when the first output is
  not text) goes out just before the first chunk that carries something the client can see, so
  a stream that fails before any output has sent nothing and the view can still fail over or
  answer with a plain JSON error.
* Text → `delta.content`; refusal → `delta.refusal`; reasoning summary / text →
  `delta.reasoning_content`, only when reasoning was requested (parts separated by a blank line).
* A function call gets a start chunk (`index`, `id`, `type`, `function.name`, empty
  `arguments`) then argument deltas; `index` is the call's position among this response's calls.
  An `image_generation_call` becomes a synthetic `image_generation` call when it is done.
* With a tuple json_schema the content is held back and sent as one chunk at the end, converted
  back to arrays (a partial index-keyed object cannot be converted).
* `finish()`: any output the deltas did not carry (taken from the terminal response), the
  empty-response text when a completed response had no text, refusal or tool call (legacy
  rule §1.9), the chunk with `finish_reason`, then — with `include_usage` — a usage chunk with
  `choices: []` (every other chunk then has `"usage": null`, as OpenAI sends).
* Errors (upstream `response.failed` / `error`, or a stream that ended or broke without a terminal
  event): one frame shaped like a chunk with `choices: []` plus an OpenAI `error` object
  `{"message", "type": "server_error", "param": null, "code"}`. The `openai` SDK raises
  `APIError` with that message on such a frame, and no `finish_reason` was sent, so plain
  clients see an unfinished choice rather than a false "stop".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.chat.completion import (
    EMPTY_RESPONSE_TEXT,
    TRUNCATED_CODE,
    TRUNCATED_MESSAGE,
    build_completion,
    failed_error,
    incomplete_reason,
    is_empty,
)
from proxy.chat.errors import ChatUpstreamTruncated
from proxy.chat.output import (
    IMAGE_GENERATION_FUNCTION,
    REASONING_SEPARATOR,
    OutputSummary,
    ResponseOutputCollector,
    chat_usage,
    finish_reason,
    image_generation_arguments,
    summarize_output,
)
from proxy.chat.request import ChatPlan
from proxy.chat.tuple_schema import restore_tuples_in_text

TERMINAL_STATUSES = {"response.completed": "completed", "response.incomplete": "incomplete"}


@dataclass(slots=True)
class _StreamedToolCall:
    index: int
    arguments_sent: bool = False


class ChatStreamTranslator:
    """Translates one upstream Responses event stream for one chat request.

    Facts for the view and telemetry once events have been fed: `status` (`completed`,
    `incomplete`, `failed` or None while no terminal event was seen), `response_id`, `usage`
    (the upstream Responses usage object), `failure` (the upstream error object) and
    `has_sent_output` (whether any chunk was returned yet).
    """

    def __init__(self, plan: ChatPlan, completion_id: str, created: int, model: str) -> None:
        self._plan = plan
        self._completion_id = completion_id
        self._created = created
        self._model = model
        self._collector = ResponseOutputCollector()
        self._hold_content = plan.tuple_schema is not None
        self._tool_calls: dict[str, _StreamedToolCall] = {}
        self._content_sent = False
        self._refusal_sent = False
        # Output indexes whose text / refusal came as deltas (the rest is sent when done).
        self._outputs_with_text: set[Any] = set()
        self._outputs_with_refusal: set[Any] = set()
        self._reasoning_part: tuple[Any, ...] | None = None
        self._finished = False
        self.has_sent_output = False
        self.status: str | None = None
        self.response: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.failure: dict[str, Any] | None = None
        self._state_handlers: dict[str, Callable[[str, dict[str, Any]], None]] = {
            "response.created": self._on_started,
            "response.in_progress": self._on_started,
            "response.completed": self._on_terminal,
            "response.incomplete": self._on_terminal,
            "response.failed": self._on_failed,
            "error": self._on_error,
        }
        self._chunk_handlers: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
            "response.output_text.delta": self._on_text_delta,
            "response.refusal.delta": self._on_refusal_delta,
            "response.reasoning_summary_text.delta": self._on_reasoning_delta,
            "response.reasoning_text.delta": self._on_reasoning_delta,
            "response.output_item.added": self._on_item_added,
            "response.function_call_arguments.delta": self._on_arguments_delta,
            "response.output_item.done": self._on_item_done,
        }

    @property
    def usage(self) -> dict[str, Any] | None:
        """The upstream Responses usage of the terminal response, if any."""
        return (self.response or {}).get("usage")

    def feed(self, event_type: str, event: dict[str, Any]) -> list[dict[str, Any]]:
        """Take one upstream event; return the chunks to send for it (often none).

        A non-streaming plan never gets chunks back; its events only build the final object.
        """
        if self._finished:
            return []
        self._collector.observe(event_type, event)
        state_handler = self._state_handlers.get(event_type)
        if state_handler is not None:
            state_handler(event_type, event)
            return []
        chunk_handler = self._chunk_handlers.get(event_type)
        if chunk_handler is None or not self._plan.stream:
            return []
        return chunk_handler(event)

    def finish(self) -> list[dict[str, Any]]:
        """Return the closing chunks once the upstream stream has ended (see the module doc).

        Without a completed/incomplete terminal event this is the error frame instead. A
        non-streaming plan gets nothing; calling it again, or after `error_chunks`, neither.
        """
        if self._finished or not self._plan.stream:
            self._finished = True
            return []
        if self.status == "failed":
            failure = failed_error(self.failure or {})
            return self.error_chunks(failure.message, failure.code)
        if self.status is None:
            return self.error_chunks(TRUNCATED_MESSAGE, TRUNCATED_CODE)
        self._finished = True
        response = self.response or {}
        summary = summarize_output(self._output_items())
        chunks = self._unsent_output(summary)
        if is_empty(self.status, summary):
            chunks += self._emit({"content": EMPTY_RESPONSE_TEXT})
        chunks += self._role_chunks()
        has_tool_calls = bool(self._tool_calls or summary.tool_calls)
        reason = finish_reason(self.status, incomplete_reason(response), has_tool_calls)
        chunks.append(self._chunk({}, reason))
        usage = chat_usage(response.get("usage"))
        if self._plan.include_usage and usage is not None:
            chunks.append({**self._envelope(), "choices": [], "usage": usage})
        return chunks

    def error_chunks(
        self, message: str, code: str = TRUNCATED_CODE, error_type: str = "server_error"
    ) -> list[dict[str, Any]]:
        """Return the error frame ending a stream that cannot finish normally (see module doc).

        For a read error or timeout the view passes its own message; nothing follows it.
        """
        if self._finished:
            return []
        self._finished = True
        frame = {
            **self._envelope(),
            "choices": [],
            "error": {"message": message, "type": error_type, "param": None, "code": code},
        }
        if self._plan.include_usage:
            frame["usage"] = None
        return [frame]

    def completion(self) -> dict[str, Any]:
        """Return the `chat.completion` for the events fed so far.

        Raises `ChatUpstreamFailed` after `response.failed` / `error`, and
        `ChatUpstreamTruncated` when no terminal event was seen.
        """
        if self.status == "failed":
            raise failed_error(self.failure or {})
        if self.status is None or self.response is None:
            raise ChatUpstreamTruncated(TRUNCATED_MESSAGE, TRUNCATED_CODE)
        return build_completion(
            self._plan,
            self._completion_id,
            self._created,
            self._model,
            self.status,
            self.response,
            self._output_items(),
        )

    def _output_items(self) -> list[dict[str, Any]]:
        """The output rebuilt from the stream, else the terminal response's (legacy rule §1.9:
        the text is the deltas', the completed output only the fallback)."""
        return self._collector.items() or (self.response or {}).get("output") or []

    # -- upstream state -------------------------------------------------------------------

    def _on_started(self, event_type: str, event: dict[str, Any]) -> None:
        response = event.get("response")
        if isinstance(response, dict) and response.get("id"):
            self.response_id = response["id"]

    def _on_terminal(self, event_type: str, event: dict[str, Any]) -> None:
        response = event.get("response")
        self.response = response if isinstance(response, dict) else {}
        self.response_id = self.response.get("id") or self.response_id
        self.status = TERMINAL_STATUSES[event_type]

    def _on_failed(self, event_type: str, event: dict[str, Any]) -> None:
        response = event.get("response")
        self.response = response if isinstance(response, dict) else {}
        self.response_id = self.response.get("id") or self.response_id
        self.failure = self.response.get("error") or {}
        self.status = "failed"

    def _on_error(self, event_type: str, event: dict[str, Any]) -> None:
        # The Responses API sends the fields flat; some upstreams nest them under "error".
        nested = event.get("error")
        self.failure = nested if isinstance(nested, dict) else event
        self.status = "failed"

    # -- chunks ---------------------------------------------------------------------------

    def _on_text_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        delta = event.get("delta")
        if not delta or self._hold_content:
            return []
        self._content_sent = True
        self._outputs_with_text.add(event.get("output_index"))
        return self._emit({"content": delta})

    def _on_refusal_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        delta = event.get("delta")
        if not delta:
            return []
        self._refusal_sent = True
        self._outputs_with_refusal.add(event.get("output_index"))
        return self._emit({"refusal": delta})

    def _on_reasoning_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        delta = event.get("delta")
        if not delta or not self._plan.reasoning_requested:
            return []
        part = (
            event.get("item_id"),
            event.get("type"),
            event.get("summary_index", event.get("content_index")),
        )
        if self._reasoning_part is not None and part != self._reasoning_part:
            delta = REASONING_SEPARATOR + delta
        self._reasoning_part = part
        return self._emit({"reasoning_content": delta})

    def _on_item_added(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        item = event.get("item") or {}
        if item.get("type") != "function_call" or not item.get("name"):
            # A call without its name yet is started when its done item arrives.
            return []
        return self._start_tool_call(_item_key(item), item, item["name"], item.get("arguments"))

    def _on_arguments_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        item_id = event.get("item_id")
        tool_call = self._tool_calls.get(item_id) if isinstance(item_id, str) else None
        delta = event.get("delta")
        if tool_call is None or not delta:
            return []
        tool_call.arguments_sent = True
        return [self._arguments_chunk(tool_call.index, delta)]

    def _on_item_done(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        item = event.get("item") or {}
        item_type = item.get("type")
        key = _item_key(item)
        if item_type == "message":
            return self._message_done(event.get("output_index"), item)
        if item_type == "image_generation_call" and key not in self._tool_calls:
            arguments = image_generation_arguments(item)
            return self._start_tool_call(key, item, IMAGE_GENERATION_FUNCTION, arguments)
        if item_type != "function_call" or not item.get("name"):
            return []
        tool_call = self._tool_calls.get(key)
        if tool_call is None:
            return self._start_tool_call(key, item, item["name"], item.get("arguments"))
        if tool_call.arguments_sent or not item.get("arguments"):
            return []
        # The upstream sent the arguments only in the done item.
        tool_call.arguments_sent = True
        return [self._arguments_chunk(tool_call.index, item["arguments"])]

    def _message_done(self, output_index: Any, item: dict[str, Any]) -> list[dict[str, Any]]:
        """Send the text / refusal of a message item whose deltas the upstream left out."""
        parts = item.get("content") or ()
        chunks: list[dict[str, Any]] = []
        if not self._hold_content and output_index not in self._outputs_with_text:
            text = "".join(
                part.get("text") or "" for part in parts if part.get("type") == "output_text"
            )
            if text:
                self._content_sent = True
                chunks += self._emit({"content": text})
        if output_index not in self._outputs_with_refusal:
            refusal = "".join(
                part.get("refusal") or "" for part in parts if part.get("type") == "refusal"
            )
            if refusal:
                self._refusal_sent = True
                chunks += self._emit({"refusal": refusal})
        return chunks

    def _start_tool_call(
        self, key: str, item: dict[str, Any], name: str, arguments: str | None
    ) -> list[dict[str, Any]]:
        tool_call = _StreamedToolCall(index=len(self._tool_calls))
        self._tool_calls[key] = tool_call
        start = {
            "index": tool_call.index,
            "id": item.get("call_id") or item.get("id") or key,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks = self._emit({"tool_calls": [start]})
        if arguments:
            tool_call.arguments_sent = True
            chunks.append(self._arguments_chunk(tool_call.index, arguments))
        return chunks

    def _unsent_output(self, summary: OutputSummary) -> list[dict[str, Any]]:
        """Chunks for output the deltas did not carry: held tuple content, or a terminal-only
        answer from an upstream that sent no deltas."""
        chunks: list[dict[str, Any]] = []
        if summary.text and not self._content_sent:
            text = summary.text
            if self._plan.tuple_schema is not None:
                text = restore_tuples_in_text(text, self._plan.tuple_schema)
            chunks += self._emit({"content": text})
        if summary.refusal and not self._refusal_sent:
            chunks += self._emit({"refusal": summary.refusal})
        if not self._tool_calls:
            for tool_call in summary.tool_calls:
                function = tool_call["function"]
                chunks += self._start_tool_call(
                    tool_call["id"], tool_call, function["name"], function["arguments"]
                )
        return chunks

    def _emit(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        chunks = self._role_chunks(opens_with_text="content" in delta)
        chunks.append(self._chunk(delta))
        return chunks

    def _role_chunks(self, opens_with_text: bool = False) -> list[dict[str, Any]]:
        """The role chunk, once. Its `content` is "" when text follows and null otherwise (as
        OpenAI sends before tool calls), so a client that adds deltas up ends with the same
        `content` as the non-stream message: null when there is no text."""
        if self.has_sent_output:
            return []
        self.has_sent_output = True
        return [self._chunk({"role": "assistant", "content": "" if opens_with_text else None})]

    def _arguments_chunk(self, index: int, arguments: str) -> dict[str, Any]:
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})

    def _chunk(self, delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        chunk = {
            **self._envelope(),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        if self._plan.include_usage:
            chunk["usage"] = None
        return chunk

    def _envelope(self) -> dict[str, Any]:
        return {
            "id": self._completion_id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
        }


def _item_key(item: dict[str, Any]) -> str:
    return item.get("id") or item.get("call_id") or ""
