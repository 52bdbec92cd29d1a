"""Fixture loading and expectation expansion for the chat translation tests.

Fixture files (`fixtures/*.json`) hold: `request` (the chat body a client sends, without stream
fields), `upstream_body` (the expected Responses body), `dropped_fields`, `reasoning_requested`,
`events` (the upstream Responses SSE events, as sent), `stream` (the expected chunks in a compact
form: `{"delta", "finish_reason"?}`, `{"usage"}` or `{"error"}`) and `completion` (the expected
non-stream `message` / `finish_reason` / `usage`, or `{"raises", "message", "code"}`).
The compact forms are expanded here into the exact dicts the translator must return.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openai import BaseModel as OpenAIModel

from proxy.chat import ChatPlan, ChatStreamTranslator, chat_request_to_responses

FIXTURE_DIRECTORY = Path(__file__).parent / "fixtures"
FIXTURE_NAMES = sorted(path.stem for path in FIXTURE_DIRECTORY.glob("*.json"))
COMPLETION_ID = "chatcmpl-5f1c0a9e8d7b6a5f4e3d2c1b"
CREATED = 1760003205
# Extra (non-SDK) keys the translator may add, as paths with list positions replaced by "[]".
ALLOWED_EXTRA_KEYS = {
    "choices[].delta.reasoning_content",
    "choices[].message.reasoning_content",
    "error",
}


def load_fixture(name: str) -> dict[str, Any]:
    """Return the parsed fixture `name`."""
    return json.loads((FIXTURE_DIRECTORY / f"{name}.json").read_text())


def plan_for(fixture: dict[str, Any], *, stream: bool, include_usage: bool = False) -> ChatPlan:
    """Translate the fixture's request with the given stream settings."""
    body = dict(fixture["request"])
    body["stream"] = stream
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return chat_request_to_responses(body)


def translate_events(
    plan: ChatPlan, events: list[dict[str, Any]], model: str
) -> tuple[ChatStreamTranslator, list[dict[str, Any]]]:
    """Feed every event to a new translator; return it and all chunks including `finish()`."""
    translator = ChatStreamTranslator(plan, COMPLETION_ID, CREATED, model)
    chunks: list[dict[str, Any]] = []
    for event in events:
        chunks.extend(translator.feed(event["type"], event))
    chunks.extend(translator.finish())
    return translator, chunks


def expected_chunks(
    entries: list[dict[str, Any]], model: str, *, include_usage: bool
) -> list[dict[str, Any]]:
    """Expand compact stream expectations into full `chat.completion.chunk` dicts."""
    chunks = []
    for entry in entries:
        envelope = {
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
        }
        if "usage" in entry:
            if include_usage:
                chunks.append({**envelope, "choices": [], "usage": entry["usage"]})
            continue
        if "error" in entry:
            chunk = {**envelope, "choices": [], "error": entry["error"]}
        else:
            choice = {
                "index": 0,
                "delta": entry["delta"],
                "logprobs": None,
                "finish_reason": entry.get("finish_reason"),
            }
            chunk = {**envelope, "choices": [choice]}
        if include_usage:
            chunk["usage"] = None
        chunks.append(chunk)
    return chunks


def expected_completion(expectation: dict[str, Any], model: str) -> dict[str, Any]:
    """Expand a compact non-stream expectation into the full `chat.completion` dict."""
    return {
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": expectation["message"],
                "logprobs": None,
                "finish_reason": expectation["finish_reason"],
            }
        ],
        "usage": expectation["usage"],
    }


def extra_keys(model: OpenAIModel, path: str = "") -> set[str]:
    """Return the paths of every key the SDK model did not declare (pydantic extras)."""
    found = {f"{path}{key}" for key in (model.model_extra or {})}
    for name in type(model).model_fields:
        value = getattr(model, name)
        values = value if isinstance(value, list) else [value]
        suffix = "[]" if isinstance(value, list) else ""
        for element in values:
            if isinstance(element, OpenAIModel):
                found |= extra_keys(element, f"{path}{name}{suffix}.")
    return found


def server_sent_events(chunks: list[dict[str, Any]]) -> bytes:
    """Frame chunks as the view does: `data: <json>` per chunk, then `data: [DONE]`."""
    frames = [f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n" for chunk in chunks]
    frames.append("data: [DONE]\n\n")
    return "".join(frames).encode()
