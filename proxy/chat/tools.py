"""Chat `tools` / legacy `functions` and `tool_choice` / legacy `function_call` → Responses.

* Function tools are flattened (`{"type": "function", "name", "description"?, "parameters",
  "strict"}`). `strict` is always sent: the Responses API treats a missing `strict` as `true`
  while Chat Completions treats it as `false`, and a non-strict schema would then be rejected.
  A missing `parameters` becomes an empty object schema (Chat: "an empty parameter list").
* `custom` (freeform) tools are rejected: a chat stream chunk can only carry function tool calls
  (`ChoiceDeltaToolCall.type` is `"function"`), so their calls could not be returned.
* Any other tool object with a string `type` (`web_search`, `image_generation`, …) is a
  Responses built-in tool and is forwarded unchanged.
"""

from __future__ import annotations

from typing import Any

from proxy.chat.errors import ChatRequestInvalid

TOOL_CHOICE_MODES = frozenset({"none", "auto", "required"})


def translate_tools(tools: Any, functions: Any) -> list[dict[str, Any]] | None:
    """Return the Responses `tools` list (tools first, then legacy functions), or None if neither.

    Raises `ChatRequestInvalid` for malformed entries and for custom tools.
    """
    if tools is None and functions is None:
        return None
    translated: list[dict[str, Any]] = []
    for position, tool in enumerate(_array(tools, "tools")):
        path = f"tools[{position}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise ChatRequestInvalid(
                f"'{path}' must be an object with a string 'type'.", path, "invalid_type"
            )
        tool_type = tool["type"]
        if tool_type == "function":
            function = tool.get("function")
            if not isinstance(function, dict):
                raise ChatRequestInvalid(
                    f"'{path}.function' must be an object.", f"{path}.function", "invalid_type"
                )
            translated.append(_function_tool(function, f"{path}.function"))
        elif tool_type == "custom":
            raise ChatRequestInvalid(
                "Custom tools are not supported on /v1/chat/completions (their calls cannot be "
                "streamed as chat chunks); use /v1/responses.",
                f"{path}.type",
                "unsupported_value",
            )
        else:
            translated.append(tool)
    for position, function in enumerate(_array(functions, "functions")):
        path = f"functions[{position}]"
        if not isinstance(function, dict):
            raise ChatRequestInvalid(f"'{path}' must be an object.", path, "invalid_type")
        translated.append(_function_tool(function, path))
    return translated


def translate_tool_choice(tool_choice: Any, function_call: Any) -> Any:
    """Return the Responses `tool_choice` (None when the client set neither field).

    `tool_choice` wins over the legacy `function_call`. Raises `ChatRequestInvalid` for values
    the Responses API has no equivalent for.
    """
    if tool_choice is None:
        return _legacy_function_call_choice(function_call)
    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICE_MODES:
            raise ChatRequestInvalid(
                f"Invalid 'tool_choice' {tool_choice!r}; expected none, auto or required.",
                "tool_choice",
                "invalid_value",
            )
        return tool_choice
    if not isinstance(tool_choice, dict):
        raise ChatRequestInvalid(
            "'tool_choice' must be a string or an object.", "tool_choice", "invalid_type"
        )
    choice_type = tool_choice.get("type")
    if choice_type == "function":
        function = tool_choice.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ChatRequestInvalid(
                "'tool_choice.function.name' is required.",
                "tool_choice.function.name",
                "missing_required_parameter",
            )
        return {"type": "function", "name": function["name"]}
    if choice_type == "allowed_tools":
        return _allowed_tools_choice(tool_choice.get("allowed_tools"))
    raise ChatRequestInvalid(
        f"Unsupported 'tool_choice' type {choice_type!r} on /v1/chat/completions.",
        "tool_choice.type",
        "unsupported_value",
    )


def _array(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ChatRequestInvalid(f"'{name}' must be an array.", name, "invalid_type")
    return value


def _function_tool(function: dict[str, Any], path: str) -> dict[str, Any]:
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ChatRequestInvalid(
            f"'{path}.name' is required.", f"{path}.name", "missing_required_parameter"
        )
    tool: dict[str, Any] = {"type": "function", "name": name}
    description = function.get("description")
    if description is not None:
        tool["description"] = description
    parameters = function.get("parameters")
    # A fresh dict per tool: the body may be edited later and must not share state.
    tool["parameters"] = {"type": "object", "properties": {}} if parameters is None else parameters
    tool["strict"] = bool(function.get("strict"))
    return tool


def _legacy_function_call_choice(function_call: Any) -> Any:
    if function_call is None:
        return None
    if function_call in ("none", "auto"):
        return function_call
    if isinstance(function_call, dict) and isinstance(function_call.get("name"), str):
        return {"type": "function", "name": function_call["name"]}
    raise ChatRequestInvalid(
        "'function_call' must be 'none', 'auto' or {\"name\": …}.", "function_call", "invalid_value"
    )


def _allowed_tools_choice(allowed: Any) -> dict[str, Any]:
    path = "tool_choice.allowed_tools"
    if not isinstance(allowed, dict) or not isinstance(allowed.get("tools"), list):
        raise ChatRequestInvalid(
            f"'{path}' must be an object with 'mode' and 'tools'.", path, "invalid_type"
        )
    tools = []
    for position, tool in enumerate(allowed["tools"]):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(function, dict):
            tools.append({"type": "function", "name": function.get("name")})
        elif isinstance(tool, dict):
            tools.append(tool)
        else:
            item_path = f"{path}.tools[{position}]"
            raise ChatRequestInvalid(f"'{item_path}' must be an object.", item_path, "invalid_type")
    return {"type": "allowed_tools", "mode": allowed.get("mode", "auto"), "tools": tools}
