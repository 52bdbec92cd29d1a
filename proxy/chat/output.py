"""Responses output items → the pieces of one chat choice, and the usage mapping.

`ResponseOutputCollector` rebuilds the output items from stream events, because the text of a
response is taken from the streamed deltas first and from the terminal `response.output` only
as a fallback (legacy rule §1.9). `summarize_output` turns items (from either source) into the
text, refusal, reasoning and tool calls of the chat message, so stream and non-stream agree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

IMAGE_GENERATION_FUNCTION = "image_generation"
REASONING_SEPARATOR = "\n\n"


@dataclass(slots=True)
class OutputSummary:
    """What a chat choice says, gathered from Responses output items in output order."""

    text: str = ""
    refusal: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)


class ResponseOutputCollector:
    """Rebuilds Responses output items from stream events.

    A `response.output_item.done` item is authoritative; items still open when the stream ends
    are assembled from their `added` item and the deltas seen. Deltas are kept as fragment lists
    and joined once, so long answers cost linear time.
    """

    def __init__(self) -> None:
        self._items: dict[int, dict[str, Any]] = {}
        self._done: set[int] = set()
        self._fragments: dict[tuple[str, int, int], list[str]] = {}

    def observe(self, event_type: str, event: dict[str, Any]) -> None:
        """Record what `event` adds to the output; events without output are ignored."""
        if event_type == "response.output_item.added" or event_type == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict):
                output_index = event.get("output_index", len(self._items))
                self._items[output_index] = item
                if event_type == "response.output_item.done":
                    self._done.add(output_index)
                    # The done item carries the full text; its fragments are no longer needed.
                    for key in [key for key in self._fragments if key[1] == output_index]:
                        del self._fragments[key]
            return
        kind = FRAGMENT_KINDS.get(event_type)
        if kind is None:
            return
        output_index = event.get("output_index", 0)
        if output_index in self._done:
            return
        position = event.get("summary_index" if kind == "summary" else "content_index", 0)
        self._fragments.setdefault((kind, output_index, position), []).append(
            event.get("delta", "")
        )

    def items(self) -> list[dict[str, Any]]:
        """Return the output items seen so far, in output order."""
        indexes = set(self._items)
        indexes.update(output_index for _, output_index, _ in self._fragments)
        return [self._assemble(output_index) for output_index in sorted(indexes)]

    def _assemble(self, output_index: int) -> dict[str, Any]:
        item = self._items.get(output_index)
        if output_index in self._done and item is not None:
            return item
        pieces = {
            (kind, position): "".join(fragments)
            for (kind, index, position), fragments in self._fragments.items()
            if index == output_index
        }
        kinds = {kind for kind, _ in pieces}
        item_type = (item or {}).get("type") or _type_for_fragments(kinds)
        assembled = dict(item or {"type": item_type})
        if item_type == "message":
            assembled["content"] = [
                {"type": "output_text", "text": text}
                if kind == "text"
                else {"type": "refusal", "refusal": text}
                for (kind, _), text in sorted(pieces.items(), key=lambda entry: entry[0][1])
                if kind in ("text", "refusal")
            ]
        elif item_type == "reasoning":
            assembled["summary"] = _texts_of(pieces, "summary", "summary_text")
            assembled["content"] = _texts_of(pieces, "reasoning", "reasoning_text")
        elif item_type == "function_call":
            streamed = pieces.get(("arguments", 0), "")
            assembled["arguments"] = (assembled.get("arguments") or "") + streamed
        return assembled


FRAGMENT_KINDS = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "refusal",
    "response.reasoning_summary_text.delta": "summary",
    "response.reasoning_text.delta": "reasoning",
    "response.function_call_arguments.delta": "arguments",
}


def _type_for_fragments(kinds: set[str]) -> str:
    if kinds & {"text", "refusal"}:
        return "message"
    if kinds & {"summary", "reasoning"}:
        return "reasoning"
    return "function_call"


def _texts_of(pieces: dict[tuple[str, int], str], kind: str, part_type: str) -> list[dict]:
    return [
        {"type": part_type, "text": text}
        for (piece_kind, _), text in sorted(pieces.items(), key=lambda entry: entry[0][1])
        if piece_kind == kind
    ]


def summarize_output(items: list[dict[str, Any]]) -> OutputSummary:
    """Return the chat view of Responses output `items`.

    Text parts are concatenated; reasoning summary and reasoning text parts are joined with a
    blank line; `function_call` items become function tool calls; an `image_generation_call`
    becomes a synthetic `image_generation` function call whose arguments are the item's fields
    (legacy rule §1.9). Other items (web search calls, custom tool calls…) have no chat form.
    """
    summary = OutputSummary()
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    offset = 0
    for item in items:
        item_type = item.get("type")
        if item_type == "message":
            for part in item.get("content") or ():
                if part.get("type") == "output_text":
                    text = part.get("text") or ""
                    summary.annotations.extend(_url_citations(part, offset))
                    texts.append(text)
                    offset += len(text)
                elif part.get("type") == "refusal":
                    refusals.append(part.get("refusal") or "")
        elif item_type == "reasoning":
            for part in [*(item.get("summary") or ()), *(item.get("content") or ())]:
                if part.get("text"):
                    reasoning.append(part["text"])
        elif item_type == "function_call" and item.get("name"):
            summary.tool_calls.append(
                function_tool_call(
                    item.get("call_id") or item.get("id") or "",
                    item["name"],
                    item.get("arguments") or "",
                )
            )
        elif item_type == "image_generation_call":
            summary.tool_calls.append(
                function_tool_call(
                    item.get("id") or "",
                    IMAGE_GENERATION_FUNCTION,
                    image_generation_arguments(item),
                )
            )
    summary.text = "".join(texts)
    summary.refusal = "".join(refusals)
    summary.reasoning = REASONING_SEPARATOR.join(reasoning)
    return summary


def function_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """Return a chat `tool_calls[]` entry of type function."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def image_generation_arguments(item: dict[str, Any]) -> str:
    """Arguments of the synthetic `image_generation` call: every item field but `type`."""
    fields = {key: value for key, value in item.items() if key != "type"}
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def _url_citations(part: dict[str, Any], offset: int) -> list[dict[str, Any]]:
    """URL citations of one text part, with indexes moved to the concatenated content."""
    citations = []
    for annotation in part.get("annotations") or ():
        if annotation.get("type") != "url_citation":
            continue
        citations.append(
            {
                "type": "url_citation",
                "url_citation": {
                    "start_index": annotation.get("start_index", 0) + offset,
                    "end_index": annotation.get("end_index", 0) + offset,
                    "title": annotation.get("title", ""),
                    "url": annotation.get("url", ""),
                },
            }
        )
    return citations


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """Map a Responses `usage` object to chat `usage` (None when the upstream sent none).

    `completion_tokens_details.reasoning_tokens` is present only when the upstream reported it.
    """
    if not isinstance(usage, dict):
        return None
    prompt_tokens = usage.get("input_tokens") or 0
    completion_tokens = usage.get("output_tokens") or 0
    total_tokens = usage.get("total_tokens")
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    mapped: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens if total_tokens is None else total_tokens,
        "prompt_tokens_details": {"cached_tokens": input_details.get("cached_tokens") or 0},
    }
    if output_details.get("reasoning_tokens") is not None:
        mapped["completion_tokens_details"] = {
            "reasoning_tokens": output_details["reasoning_tokens"]
        }
    return mapped


def finish_reason(status: str, incomplete_reason: str | None, has_tool_calls: bool) -> str:
    """Map a terminal Responses status to a chat `finish_reason`.

    An incomplete response is `content_filter` when filtered and otherwise `length` (its output
    was cut, and `max_output_tokens` is the reason the upstream gives for that); a complete one
    with tool calls is `tool_calls`, else `stop` (refusals included, as OpenAI does).
    """
    if status == "incomplete":
        return "content_filter" if incomplete_reason == "content_filter" else "length"
    return "tool_calls" if has_tool_calls else "stop"
