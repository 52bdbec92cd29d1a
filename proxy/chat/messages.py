"""Chat `messages` → Responses `instructions` + `input` items for the Codex upstream.

* `system` / `developer` messages before the first other message are joined (blank line between)
  into `instructions`, the string the Codex upstream requires; it is `""` when there are none.
  Later ones become `developer` message items in place. The legacy rule (§1.9) sent
  `role: "system"` items, which the Codex upstream now rejects ("System messages are not
  allowed"); `developer` is the role Codex itself uses for mid-conversation instructions.
* `user` → message item with `input_text` / `input_image` / `input_audio` / `input_file` parts.
* `assistant` → message item with `output_text` / `refusal` parts (the Responses API refuses
  `input_text` on assistant turns), then one `function_call` item per tool call.
* `tool` → `function_call_output` for its `tool_call_id`; legacy `function` → the same, paired
  with the latest unanswered legacy `function_call` of that name (call ids `fc_<name>`).
* A message's `name` has no Responses counterpart and is not sent.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.chat.errors import ChatRequestInvalid

SYSTEM_ROLES = frozenset({"system", "developer"})


def translate_messages(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    """Return `(instructions, input items)` for the chat `messages` array.

    Raises `ChatRequestInvalid` for a non-list or empty array, a non-object message, an unknown
    role or a content part that cannot be expressed upstream.
    """
    if not isinstance(messages, list):
        raise ChatRequestInvalid("'messages' must be an array.", "messages", "invalid_type")
    if not messages:
        raise ChatRequestInvalid(
            "'messages' must contain at least one message.", "messages", "invalid_value"
        )
    instruction_texts: list[str] = []
    items: list[dict[str, Any]] = []
    legacy_calls = _LegacyFunctionCalls()
    leading = True
    for position, message in enumerate(messages):
        path = f"messages[{position}]"
        if not isinstance(message, dict):
            raise ChatRequestInvalid(f"'{path}' must be an object.", path, "invalid_type")
        role = message.get("role")
        if role in SYSTEM_ROLES:
            text = _text_content(message.get("content"), f"{path}.content")
            if leading:
                instruction_texts.append(text)
            else:
                items.append(_message_item("developer", [_input_text(text)]))
            continue
        leading = False
        if role == "user":
            parts = _user_content(message.get("content"), f"{path}.content")
            items.append(_message_item("user", parts))
        elif role == "assistant":
            items.extend(_assistant_items(message, path, legacy_calls))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ChatRequestInvalid(
                    f"'{path}.tool_call_id' is required for a tool message.",
                    f"{path}.tool_call_id",
                    "missing_required_parameter",
                )
            output = _text_content(message.get("content"), f"{path}.content")
            items.append(_function_call_output(call_id, output))
        elif role == "function":
            name = message.get("name")
            if not isinstance(name, str) or not name:
                raise ChatRequestInvalid(
                    f"'{path}.name' is required for a function message.",
                    f"{path}.name",
                    "missing_required_parameter",
                )
            content = message.get("content")
            output = "" if content is None else _text_content(content, f"{path}.content")
            items.append(_function_call_output(legacy_calls.answer(name), output))
        else:
            raise ChatRequestInvalid(
                f"Unknown role {role!r} in '{path}'; expected system, developer, user, "
                "assistant, tool or function.",
                f"{path}.role",
                "invalid_value",
            )
    return "\n\n".join(instruction_texts), items


class _LegacyFunctionCalls:
    """Call ids for legacy `function_call` turns, which carry no id of their own."""

    def __init__(self) -> None:
        self._issued: set[str] = set()
        self._unanswered: dict[str, list[str]] = {}

    def issue(self, name: str) -> str:
        """Return a new call id `fc_<name>` (suffixed `_2`, `_3`… when the name repeats)."""
        call_id = f"fc_{name}"
        counter = 1
        while call_id in self._issued:
            counter += 1
            call_id = f"fc_{name}_{counter}"
        self._issued.add(call_id)
        self._unanswered.setdefault(name, []).append(call_id)
        return call_id

    def answer(self, name: str) -> str:
        """Return the call id a `function` message of `name` answers (the latest open one)."""
        open_calls = self._unanswered.get(name)
        if open_calls:
            return open_calls.pop()
        return f"fc_{name}"


def _message_item(role: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


def _input_text(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def _function_call_output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _text_content(content: Any, path: str) -> str:
    """Return the text of a string or an array of `text` parts (joined as they stand)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for position, part in enumerate(content):
            part_path = f"{path}[{position}]"
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ChatRequestInvalid(
                    f"'{part_path}' must be a text part for this role.",
                    f"{part_path}.type",
                    "invalid_value",
                )
            texts.append(_required_string(part, "text", part_path))
        return "".join(texts)
    raise ChatRequestInvalid(
        f"'{path}' must be a string or an array of text parts.", path, "invalid_type"
    )


def _user_content(content: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_input_text(content)]
    if not isinstance(content, list):
        raise ChatRequestInvalid(
            f"'{path}' must be a string or an array of content parts.", path, "invalid_type"
        )
    return [_user_part(part, f"{path}[{position}]") for position, part in enumerate(content)]


def _user_part(part: Any, path: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise ChatRequestInvalid(f"'{path}' must be an object.", path, "invalid_type")
    part_type = part.get("type")
    if part_type == "text":
        return _input_text(_required_string(part, "text", path))
    if part_type == "image_url":
        return _image_part(part.get("image_url"), f"{path}.image_url")
    if part_type == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict):
            raise ChatRequestInvalid(
                f"'{path}.input_audio' must be an object.", f"{path}.input_audio", "invalid_type"
            )
        audio_path = f"{path}.input_audio"
        return {
            "type": "input_audio",
            "input_audio": {
                "data": _required_string(audio, "data", audio_path),
                "format": _required_string(audio, "format", audio_path),
            },
        }
    if part_type == "file":
        return _file_part(part.get("file"), f"{path}.file")
    raise ChatRequestInvalid(
        f"Unsupported content part type {part_type!r} in '{path}'; expected text, image_url, "
        "input_audio or file.",
        f"{path}.type",
        "invalid_value",
    )


def _image_part(image: Any, path: str) -> dict[str, Any]:
    """`image_url` may be the URL string itself or `{"url", "detail"?}`."""
    if isinstance(image, str) and image:
        return {"type": "input_image", "image_url": image}
    if not isinstance(image, dict):
        raise ChatRequestInvalid(
            f"'{path}' must be a URL string or an object with 'url'.", path, "invalid_type"
        )
    part: dict[str, Any] = {
        "type": "input_image",
        "image_url": _required_string(image, "url", path),
    }
    detail = image.get("detail")
    if detail is not None:
        if not isinstance(detail, str):
            raise ChatRequestInvalid(
                f"'{path}.detail' must be a string.", f"{path}.detail", "invalid_type"
            )
        part["detail"] = detail
    return part


def _file_part(file: Any, path: str) -> dict[str, Any]:
    if not isinstance(file, dict):
        raise ChatRequestInvalid(f"'{path}' must be an object.", path, "invalid_type")
    part: dict[str, Any] = {"type": "input_file"}
    for key in ("file_id", "file_data", "filename"):
        value = file.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise ChatRequestInvalid(
                    f"'{path}.{key}' must be a string.", f"{path}.{key}", "invalid_type"
                )
            part[key] = value
    if "file_id" not in part and "file_data" not in part:
        raise ChatRequestInvalid(
            f"'{path}' needs 'file_id' or 'file_data'.", path, "missing_required_parameter"
        )
    return part


def _assistant_items(
    message: dict[str, Any], path: str, legacy_calls: _LegacyFunctionCalls
) -> list[dict[str, Any]]:
    content_parts = _assistant_content(message.get("content"), f"{path}.content")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content_parts.append({"type": "refusal", "refusal": refusal})
    items = [_message_item("assistant", content_parts)] if content_parts else []
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise ChatRequestInvalid(
                f"'{path}.tool_calls' must be an array.", f"{path}.tool_calls", "invalid_type"
            )
        for position, tool_call in enumerate(tool_calls):
            items.append(_function_call_item(tool_call, f"{path}.tool_calls[{position}]"))
    function_call = message.get("function_call")
    if function_call is not None:
        function_path = f"{path}.function_call"
        if not isinstance(function_call, dict):
            raise ChatRequestInvalid(
                f"'{function_path}' must be an object.", function_path, "invalid_type"
            )
        name = _required_string(function_call, "name", function_path)
        items.append(
            {
                "type": "function_call",
                "call_id": legacy_calls.issue(name),
                "name": name,
                "arguments": _arguments_text(function_call.get("arguments"), function_path),
            }
        )
    return items


def _assistant_content(content: Any, path: str) -> list[dict[str, Any]]:
    """Assistant text as `output_text` parts; empty text is left out (nothing to replay)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "output_text", "text": content}] if content else []
    if not isinstance(content, list):
        raise ChatRequestInvalid(
            f"'{path}' must be a string, an array of parts or null.", path, "invalid_type"
        )
    parts = []
    for position, part in enumerate(content):
        part_path = f"{path}[{position}]"
        part_type = part.get("type") if isinstance(part, dict) else None
        if part_type == "text":
            parts.append({"type": "output_text", "text": _required_string(part, "text", part_path)})
        elif part_type == "refusal":
            refusal = _required_string(part, "refusal", part_path)
            parts.append({"type": "refusal", "refusal": refusal})
        else:
            raise ChatRequestInvalid(
                f"'{part_path}' must be a text or refusal part.",
                f"{part_path}.type",
                "invalid_value",
            )
    return parts


def _function_call_item(tool_call: Any, path: str) -> dict[str, Any]:
    if not isinstance(tool_call, dict):
        raise ChatRequestInvalid(f"'{path}' must be an object.", path, "invalid_type")
    tool_type = tool_call.get("type", "function")
    if tool_type != "function":
        raise ChatRequestInvalid(
            f"Tool call type {tool_type!r} in '{path}' is not supported on "
            "/v1/chat/completions; only function tool calls are.",
            f"{path}.type",
            "unsupported_value",
        )
    call_id = _required_string(tool_call, "id", path)
    function = tool_call.get("function")
    if not isinstance(function, dict):
        raise ChatRequestInvalid(
            f"'{path}.function' must be an object.", f"{path}.function", "invalid_type"
        )
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": _required_string(function, "name", f"{path}.function"),
        "arguments": _arguments_text(function.get("arguments"), f"{path}.function"),
    }


def _arguments_text(arguments: Any, path: str) -> str:
    """Arguments are a JSON string; an object (sent by some clients) is serialised."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    raise ChatRequestInvalid(
        f"'{path}.arguments' must be a JSON string.", f"{path}.arguments", "invalid_type"
    )


def _required_string(container: dict[str, Any], key: str, path: str) -> str:
    value = container.get(key)
    if not isinstance(value, str):
        raise ChatRequestInvalid(
            f"'{path}.{key}' is required and must be a string.",
            f"{path}.{key}",
            "missing_required_parameter" if value is None else "invalid_type",
        )
    return value
