"""`POST /v1/chat/completions` body → the Responses body sent to the Codex upstream.

Every chat field and what the upstream body gets for it. MAP = translated, FORWARD = sent as
is, DROP = not sent, REJECT = HTTP 400 with the OpenAI error envelope.

model                   FORWARD `model`. `ChatPlan.requested_model` keeps the client's string
                                (the view swaps in the alias-resolved id).
messages                MAP     `instructions` (always a string) + `input` (always a list), as the
                                Codex upstream requires; see `proxy.chat.messages`.
stream                  MAP     upstream `stream: true` always: the proxy aggregates for
                                non-stream clients. `ChatPlan.stream` is the client's value
                                (absent → false, the Chat Completions default).
stream_options          MAP     `include_usage` → `ChatPlan.include_usage` (only with stream);
                                `include_obfuscation` DROP (chunks carry no padding).
tools, functions        MAP     flattened function tools, built-in tools as is; custom tools
                                REJECT (their calls cannot be chat chunks); see `proxy.chat.tools`.
tool_choice,            MAP     string and object forms; see `proxy.chat.tools`.
  function_call
parallel_tool_calls     FORWARD
reasoning_effort        MAP     `reasoning: {"effort": …, "summary": "auto"}`; reasoning counts as
                                requested (→ `reasoning_content`) unless the effort is `none`.
service_tier            FORWARD
response_format         MAP     `text.format`: text / json_object / json_schema (name defaults to
                                "response"; tuples rewritten, see `proxy.chat.tuple_schema`).
verbosity               MAP     `text.verbosity`.
prompt_cache_key        FORWARD
user                    MAP     `prompt_cache_key` when the client sent none (legacy rule §1.9).
web_search_options      MAP     a `web_search` tool appended to `tools`.
store                   MAP     always `store: false`: the Codex upstream answers 400 "Store must
                                be set to false" otherwise.
max_tokens,             DROP    the Codex upstream rejects `max_output_tokens` (400 "Unsupported
  max_completion_tokens         parameter") and sets the output budget itself.
temperature, top_p,     DROP    the Codex upstream rejects sampling parameters (400 "Unsupported
  frequency_penalty,            parameter").
  presence_penalty
stop, logit_bias,       DROP    no Responses counterpart.
  seed, prediction
logprobs, top_logprobs  DROP    choices carry `logprobs: null`.
metadata                DROP    only kept with stored completions, and nothing is stored.
safety_identifier,      DROP    the Codex client never sends them, so the upstream is not known to
  prompt_cache_retention,       accept them.
  prompt_cache_options,
  moderation
n                       REJECT  when > 1 (`unsupported_value`): one upstream response is one
                                choice. Absent or 1 is fine.
modalities, audio       REJECT  any modality but "text", or `audio` set: no audio output upstream.
anything else           DROP

Every dropped field the client set is named in `ChatPlan.dropped_fields`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.chat.errors import ChatRequestInvalid
from proxy.chat.messages import translate_messages
from proxy.chat.tools import translate_tool_choice, translate_tools
from proxy.chat.tuple_schema import rewrite_tuple_schemas

# Fields read by `chat_request_to_responses`; every other field the client set is dropped.
CONSUMED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "parallel_tool_calls",
        "reasoning_effort",
        "service_tier",
        "response_format",
        "verbosity",
        "prompt_cache_key",
        "user",
        "web_search_options",
        "n",
        "modalities",
        "audio",
    }
)


@dataclass(frozen=True, slots=True)
class ChatPlan:
    """A translated chat request: the upstream body plus what the response side needs.

    `responses_body` keys follow the Codex client's own order (model, instructions, input,
    tools, tool_choice, parallel_tool_calls, reasoning, store, stream, prompt_cache_key,
    service_tier, text); the view may replace `model` with the alias-resolved id.
    `tuple_schema` is the client's original json_schema when tuples were rewritten (the response
    side converts the output back with it), else None.
    """

    responses_body: dict[str, Any]
    requested_model: str
    stream: bool
    include_usage: bool
    reasoning_requested: bool
    tuple_schema: dict[str, Any] | None = None
    dropped_fields: tuple[str, ...] = ()


def chat_request_to_responses(body: Any) -> ChatPlan:
    """Translate a Chat Completions request body into a `ChatPlan`.

    Raises `ChatRequestInvalid` (OpenAI error envelope, HTTP 400) for a body that is not an
    object, a missing model, invalid messages, or a feature the upstream cannot serve.
    """
    if not isinstance(body, dict):
        raise ChatRequestInvalid("The request body must be a JSON object.", None, "invalid_type")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ChatRequestInvalid(
            "'model' is required and must be a non-empty string.",
            "model",
            "missing_required_parameter",
        )
    _reject_unservable(body)
    stream = _optional_bool(body, "stream") or False
    instructions, input_items = translate_messages(body.get("messages"))

    upstream: dict[str, Any] = {"model": model, "instructions": instructions, "input": input_items}
    tools = translate_tools(body.get("tools"), body.get("functions"))
    web_search = _web_search_tool(body.get("web_search_options"))
    if web_search is not None:
        tools = [*(tools or []), web_search]
    if tools is not None:
        upstream["tools"] = tools
    tool_choice = translate_tool_choice(body.get("tool_choice"), body.get("function_call"))
    if tool_choice is not None:
        upstream["tool_choice"] = tool_choice
    parallel_tool_calls = _optional_bool(body, "parallel_tool_calls")
    if parallel_tool_calls is not None:
        upstream["parallel_tool_calls"] = parallel_tool_calls
    effort = _optional_string(body, "reasoning_effort")
    if effort is not None:
        upstream["reasoning"] = {"effort": effort, "summary": "auto"}
    upstream["store"] = False
    upstream["stream"] = True
    prompt_cache_key = _optional_string(body, "prompt_cache_key")
    if prompt_cache_key is None:
        prompt_cache_key = _optional_string(body, "user")
    if prompt_cache_key is not None:
        upstream["prompt_cache_key"] = prompt_cache_key
    service_tier = _optional_string(body, "service_tier")
    if service_tier is not None:
        upstream["service_tier"] = service_tier
    text_format, tuple_schema = _text_format(body.get("response_format"))
    text: dict[str, Any] = {}
    if text_format is not None:
        text["format"] = text_format
    verbosity = _optional_string(body, "verbosity")
    if verbosity is not None:
        text["verbosity"] = verbosity
    if text:
        upstream["text"] = text

    return ChatPlan(
        responses_body=upstream,
        requested_model=model,
        stream=stream,
        include_usage=stream and _include_usage(body.get("stream_options")),
        reasoning_requested=effort is not None and effort != "none",
        tuple_schema=tuple_schema,
        dropped_fields=_dropped_fields(body, user_shadowed=prompt_cache_key != body.get("user")),
    )


def _reject_unservable(body: dict[str, Any]) -> None:
    choices = body.get("n")
    if choices is not None:
        if not isinstance(choices, int) or isinstance(choices, bool) or choices < 1:
            raise ChatRequestInvalid("'n' must be a positive integer.", "n", "invalid_type")
        if choices > 1:
            raise ChatRequestInvalid(
                "'n' greater than 1 is not supported: the upstream returns one choice.",
                "n",
                "unsupported_value",
            )
    modalities = body.get("modalities")
    if modalities is not None and (
        not isinstance(modalities, list) or any(modality != "text" for modality in modalities)
    ):
        raise ChatRequestInvalid(
            "Only the 'text' output modality is supported.", "modalities", "unsupported_value"
        )
    if body.get("audio") is not None:
        raise ChatRequestInvalid("Audio output is not supported.", "audio", "unsupported_parameter")


def _text_format(response_format: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Return `(text.format, original schema if tuples were rewritten)`."""
    if response_format is None:
        return None, None
    if not isinstance(response_format, dict):
        raise ChatRequestInvalid(
            "'response_format' must be an object.", "response_format", "invalid_type"
        )
    format_type = response_format.get("type")
    if format_type in ("text", "json_object"):
        return {"type": format_type}, None
    if format_type != "json_schema":
        raise ChatRequestInvalid(
            f"Unsupported 'response_format.type' {format_type!r}; expected text, json_object "
            "or json_schema.",
            "response_format.type",
            "invalid_value",
        )
    definition = response_format.get("json_schema")
    if not isinstance(definition, dict) or not isinstance(definition.get("schema"), dict):
        raise ChatRequestInvalid(
            "'response_format.json_schema.schema' is required and must be an object.",
            "response_format.json_schema.schema",
            "missing_required_parameter",
        )
    schema = definition["schema"]
    upstream_schema, rewritten = rewrite_tuple_schemas(schema)
    text_format: dict[str, Any] = {
        "type": "json_schema",
        "name": definition.get("name") or "response",
    }
    if definition.get("description") is not None:
        text_format["description"] = definition["description"]
    text_format["schema"] = upstream_schema
    if definition.get("strict") is not None:
        text_format["strict"] = definition["strict"]
    return text_format, (schema if rewritten else None)


def _web_search_tool(options: Any) -> dict[str, Any] | None:
    if options is None:
        return None
    if not isinstance(options, dict):
        raise ChatRequestInvalid(
            "'web_search_options' must be an object.", "web_search_options", "invalid_type"
        )
    tool: dict[str, Any] = {"type": "web_search"}
    if options.get("search_context_size") is not None:
        tool["search_context_size"] = options["search_context_size"]
    location = options.get("user_location")
    if isinstance(location, dict):
        # Chat nests the fields under "approximate"; the Responses tool has them flat.
        approximate = location.get("approximate")
        tool["user_location"] = {
            "type": "approximate",
            **(approximate if isinstance(approximate, dict) else {}),
        }
    return tool


def _include_usage(stream_options: Any) -> bool:
    if stream_options is None:
        return False
    if not isinstance(stream_options, dict):
        raise ChatRequestInvalid(
            "'stream_options' must be an object.", "stream_options", "invalid_type"
        )
    return stream_options.get("include_usage") is True


def _dropped_fields(body: dict[str, Any], *, user_shadowed: bool) -> tuple[str, ...]:
    """Return the names of the fields the client set that the upstream body does not carry."""
    dropped = [
        key for key, value in body.items() if key not in CONSUMED_FIELDS and value is not None
    ]
    if user_shadowed and body.get("user") is not None:
        # An explicit prompt_cache_key wins; `user` then reaches the upstream nowhere.
        dropped.append("user")
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_obfuscation") is not None:
        dropped.append("stream_options.include_obfuscation")
    return tuple(dropped)


def _optional_bool(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ChatRequestInvalid(f"'{key}' must be a boolean.", key, "invalid_type")


def _optional_string(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ChatRequestInvalid(f"'{key}' must be a string.", key, "invalid_type")
