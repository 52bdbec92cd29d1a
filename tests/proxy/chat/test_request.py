"""Request translation: validation errors (OpenAI envelope) and the mappings fixtures don't show."""

from __future__ import annotations

import copy

import pytest

from proxy.chat import ChatRequestInvalid, chat_request_to_responses

USER = {"role": "user", "content": "Hi"}


def body(**fields):
    return {"model": "gpt-5.4", "messages": [USER], **fields}


def envelope(message, param, code):
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }


INVALID_REQUESTS = [
    (
        "body is not an object",
        ["model"],
        envelope("The request body must be a JSON object.", None, "invalid_type"),
    ),
    (
        "model missing",
        {"messages": [USER]},
        envelope(
            "'model' is required and must be a non-empty string.",
            "model",
            "missing_required_parameter",
        ),
    ),
    (
        "model blank",
        {"model": "  ", "messages": [USER]},
        envelope(
            "'model' is required and must be a non-empty string.",
            "model",
            "missing_required_parameter",
        ),
    ),
    (
        "messages missing",
        {"model": "gpt-5.4"},
        envelope("'messages' must be an array.", "messages", "invalid_type"),
    ),
    (
        "messages not a list",
        {"model": "gpt-5.4", "messages": {"role": "user", "content": "Hi"}},
        envelope("'messages' must be an array.", "messages", "invalid_type"),
    ),
    (
        "messages empty",
        {"model": "gpt-5.4", "messages": []},
        envelope("'messages' must contain at least one message.", "messages", "invalid_value"),
    ),
    (
        "message not an object",
        {"model": "gpt-5.4", "messages": ["Hi"]},
        envelope("'messages[0]' must be an object.", "messages[0]", "invalid_type"),
    ),
    (
        "unknown role",
        {"model": "gpt-5.4", "messages": [USER, {"role": "robot", "content": "beep"}]},
        envelope(
            "Unknown role 'robot' in 'messages[1]'; expected system, developer, user, "
            "assistant, tool or function.",
            "messages[1].role",
            "invalid_value",
        ),
    ),
    (
        "unknown user part type",
        {
            "model": "gpt-5.4",
            "messages": [{"role": "user", "content": [{"type": "video_url", "video_url": "x"}]}],
        },
        envelope(
            "Unsupported content part type 'video_url' in 'messages[0].content[0]'; expected "
            "text, image_url, input_audio or file.",
            "messages[0].content[0].type",
            "invalid_value",
        ),
    ),
    (
        "image part without url",
        {
            "model": "gpt-5.4",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        },
        envelope(
            "'messages[0].content[0].image_url.url' is required and must be a string.",
            "messages[0].content[0].image_url.url",
            "missing_required_parameter",
        ),
    ),
    (
        "image part on a system message",
        {
            "model": "gpt-5.4",
            "messages": [
                {"role": "system", "content": [{"type": "image_url", "image_url": "https://x"}]},
                USER,
            ],
        },
        envelope(
            "'messages[0].content[0]' must be a text part for this role.",
            "messages[0].content[0].type",
            "invalid_value",
        ),
    ),
    (
        "user content is a number",
        {"model": "gpt-5.4", "messages": [{"role": "user", "content": 42}]},
        envelope(
            "'messages[0].content' must be a string or an array of content parts.",
            "messages[0].content",
            "invalid_type",
        ),
    ),
    (
        "file part without file_id or file_data",
        {
            "model": "gpt-5.4",
            "messages": [
                {"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf"}}]}
            ],
        },
        envelope(
            "'messages[0].content[0].file' needs 'file_id' or 'file_data'.",
            "messages[0].content[0].file",
            "missing_required_parameter",
        ),
    ),
    (
        "tool message without tool_call_id",
        {"model": "gpt-5.4", "messages": [USER, {"role": "tool", "content": "18C"}]},
        envelope(
            "'messages[1].tool_call_id' is required for a tool message.",
            "messages[1].tool_call_id",
            "missing_required_parameter",
        ),
    ),
    (
        "function message without name",
        {"model": "gpt-5.4", "messages": [USER, {"role": "function", "content": "18C"}]},
        envelope(
            "'messages[1].name' is required for a function message.",
            "messages[1].name",
            "missing_required_parameter",
        ),
    ),
    (
        "custom tool call in history",
        {
            "model": "gpt-5.4",
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "call_1", "type": "custom", "custom": {"name": "x", "input": "y"}}
                    ],
                },
            ],
        },
        envelope(
            "Tool call type 'custom' in 'messages[1].tool_calls[0]' is not supported on "
            "/v1/chat/completions; only function tool calls are.",
            "messages[1].tool_calls[0].type",
            "unsupported_value",
        ),
    ),
    (
        "n greater than one",
        body(n=2),
        envelope(
            "'n' greater than 1 is not supported: the upstream returns one choice.",
            "n",
            "unsupported_value",
        ),
    ),
    (
        "n not an integer",
        body(n="2"),
        envelope("'n' must be a positive integer.", "n", "invalid_type"),
    ),
    (
        "audio modality",
        body(modalities=["text", "audio"]),
        envelope(
            "Only the 'text' output modality is supported.", "modalities", "unsupported_value"
        ),
    ),
    (
        "audio output parameters",
        body(audio={"voice": "alloy", "format": "wav"}),
        envelope("Audio output is not supported.", "audio", "unsupported_parameter"),
    ),
    (
        "custom tool",
        body(tools=[{"type": "custom", "custom": {"name": "apply_patch"}}]),
        envelope(
            "Custom tools are not supported on /v1/chat/completions (their calls cannot be "
            "streamed as chat chunks); use /v1/responses.",
            "tools[0].type",
            "unsupported_value",
        ),
    ),
    (
        "function tool without name",
        body(tools=[{"type": "function", "function": {"description": "nameless"}}]),
        envelope(
            "'tools[0].function.name' is required.",
            "tools[0].function.name",
            "missing_required_parameter",
        ),
    ),
    (
        "tool_choice custom",
        body(tool_choice={"type": "custom", "custom": {"name": "apply_patch"}}),
        envelope(
            "Unsupported 'tool_choice' type 'custom' on /v1/chat/completions.",
            "tool_choice.type",
            "unsupported_value",
        ),
    ),
    (
        "tool_choice unknown string",
        body(tool_choice="always"),
        envelope(
            "Invalid 'tool_choice' 'always'; expected none, auto or required.",
            "tool_choice",
            "invalid_value",
        ),
    ),
    (
        "response_format unknown type",
        body(response_format={"type": "xml"}),
        envelope(
            "Unsupported 'response_format.type' 'xml'; expected text, json_object or json_schema.",
            "response_format.type",
            "invalid_value",
        ),
    ),
    (
        "json_schema without schema",
        body(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
        envelope(
            "'response_format.json_schema.schema' is required and must be an object.",
            "response_format.json_schema.schema",
            "missing_required_parameter",
        ),
    ),
    (
        "stream not a boolean",
        body(stream="yes"),
        envelope("'stream' must be a boolean.", "stream", "invalid_type"),
    ),
    (
        "reasoning_effort not a string",
        body(reasoning_effort=3),
        envelope("'reasoning_effort' must be a string.", "reasoning_effort", "invalid_type"),
    ),
]


@pytest.mark.parametrize(
    ("request_body", "expected_envelope"),
    [case[1:] for case in INVALID_REQUESTS],
    ids=[case[0] for case in INVALID_REQUESTS],
)
def test_invalid_request_is_rejected_with_the_openai_error_envelope(
    request_body, expected_envelope
):
    # given
    original = copy.deepcopy(request_body)

    # when
    with pytest.raises(ChatRequestInvalid) as raised:
        chat_request_to_responses(request_body)

    # then
    assert raised.value.envelope() == expected_envelope
    assert raised.value.status_code == 400
    assert request_body == original


def test_translation_leaves_the_client_body_untouched():
    # given
    request_body = body(
        tools=[{"type": "function", "function": {"name": "f"}}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "t", "schema": {"type": "array", "prefixItems": [{}]}},
        },
    )
    original = copy.deepcopy(request_body)

    # when
    chat_request_to_responses(request_body)

    # then
    assert request_body == original


def test_every_dropped_field_is_named_in_body_order():
    # given
    request_body = body(
        temperature=0.1,
        top_p=0.9,
        frequency_penalty=0.5,
        presence_penalty=0.5,
        max_tokens=10,
        max_completion_tokens=10,
        stop=["\n"],
        logprobs=True,
        top_logprobs=3,
        logit_bias={"50256": -100},
        seed=7,
        metadata={"run": "1"},
        store=True,
        prediction={"type": "content", "content": "x"},
        safety_identifier="hash",
        prompt_cache_retention="24h",
        moderation={"model": "omni-moderation-latest"},
        use_websocket=False,
        stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False},
        n=None,
    )

    # when
    plan = chat_request_to_responses(request_body)

    # then
    assert plan.dropped_fields == (
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "seed",
        "metadata",
        "store",
        "prediction",
        "safety_identifier",
        "prompt_cache_retention",
        "moderation",
        "use_websocket",
        "stream_options.include_obfuscation",
    )
    assert plan.responses_body == {
        "model": "gpt-5.4",
        "instructions": "",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
        ],
        "store": False,
        "stream": True,
    }
    assert (plan.stream, plan.include_usage) == (True, True)


def test_stream_defaults_to_false_and_include_usage_needs_stream():
    # when
    absent = chat_request_to_responses(body(stream_options={"include_usage": True}))
    null = chat_request_to_responses(body(stream=None))

    # then: the upstream always streams; the client gets what it asked for
    assert (absent.stream, absent.include_usage) == (False, False)
    assert (null.stream, null.include_usage) == (False, False)
    assert absent.responses_body["stream"] is True
    assert absent.responses_body["store"] is False


def test_user_parts_audio_and_file_map_to_responses_parts():
    # given
    request_body = {
        "model": "gpt-5.4",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                    {
                        "type": "file",
                        "file": {
                            "file_data": "data:application/pdf;base64,JVBERi0=",
                            "filename": "a.pdf",
                        },
                    },
                    {"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}},
                ],
            }
        ],
    }

    # when
    plan = chat_request_to_responses(request_body)

    # then
    assert plan.responses_body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,JVBERi0=",
                    "filename": "a.pdf",
                },
                {"type": "input_file", "file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"},
            ],
        }
    ]


def test_assistant_history_keeps_text_refusal_and_tool_calls_in_order():
    # given
    request_body = {
        "model": "gpt-5.4",
        "messages": [
            {"role": "system", "content": "Be safe."},
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking. "},
                    {"type": "refusal", "refusal": "Not that."},
                ],
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"x": 1}},
                    },
                    {"id": "call_b", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "assistant", "content": "", "refusal": "No."},
            {"role": "assistant", "content": ""},
            {
                "role": "system",
                "content": [{"type": "text", "text": "Late "}, {"type": "text", "text": "rule."}],
            },
        ],
    }

    # when
    plan = chat_request_to_responses(request_body)

    # then
    assert plan.responses_body["instructions"] == "Be safe."
    assert plan.responses_body["input"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Checking. "},
                {"type": "refusal", "refusal": "Not that."},
            ],
        },
        {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": '{"x":1}'},
        {"type": "function_call", "call_id": "call_b", "name": "g", "arguments": "{}"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": "No."}],
        },
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "Late rule."}],
        },
    ]


def test_repeated_legacy_function_calls_get_distinct_ids_and_answers_pair_with_the_latest():
    # given
    def call(arguments):
        return {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "lookup", "arguments": arguments},
        }

    request_body = {
        "model": "gpt-5.4",
        "messages": [
            USER,
            call('{"id":1}'),
            {"role": "function", "name": "lookup", "content": "one"},
            call('{"id":2}'),
            {"role": "function", "name": "lookup", "content": None},
            {"role": "function", "name": "other", "content": "orphan"},
        ],
    }

    # when
    plan = chat_request_to_responses(request_body)

    # then
    assert plan.responses_body["input"][1:] == [
        {
            "type": "function_call",
            "call_id": "fc_lookup",
            "name": "lookup",
            "arguments": '{"id":1}',
        },
        {"type": "function_call_output", "call_id": "fc_lookup", "output": "one"},
        {
            "type": "function_call",
            "call_id": "fc_lookup_2",
            "name": "lookup",
            "arguments": '{"id":2}',
        },
        {"type": "function_call_output", "call_id": "fc_lookup_2", "output": ""},
        {"type": "function_call_output", "call_id": "fc_other", "output": "orphan"},
    ]


def test_tools_then_legacy_functions_with_built_in_tools_forwarded():
    # given
    request_body = body(
        tools=[
            {
                "type": "function",
                "function": {"name": "f", "strict": True, "parameters": {"type": "object"}},
            },
            {"type": "web_search", "search_context_size": "high"},
        ],
        functions=[{"name": "g"}],
        function_call={"name": "g"},
        parallel_tool_calls=False,
    )

    # when
    plan = chat_request_to_responses(request_body)

    # then
    assert plan.responses_body["tools"] == [
        {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True},
        {"type": "web_search", "search_context_size": "high"},
        {
            "type": "function",
            "name": "g",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        },
    ]
    assert plan.responses_body["tool_choice"] == {"type": "function", "name": "g"}
    assert plan.responses_body["parallel_tool_calls"] is False


@pytest.mark.parametrize(
    ("tool_choice", "function_call", "expected"),
    [
        ("none", None, "none"),
        ("auto", "none", "auto"),
        (None, "none", "none"),
        ({"type": "function", "function": {"name": "f"}}, None, {"type": "function", "name": "f"}),
        (
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [
                        {"type": "function", "function": {"name": "f"}},
                        {"type": "web_search"},
                    ],
                },
            },
            None,
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}],
            },
        ),
    ],
)
def test_tool_choice_forms(tool_choice, function_call, expected):
    # when
    plan = chat_request_to_responses(body(tool_choice=tool_choice, function_call=function_call))

    # then
    assert plan.responses_body["tool_choice"] == expected


@pytest.mark.parametrize(
    ("response_format", "expected_text"),
    [
        ({"type": "text"}, {"format": {"type": "text"}}),
        ({"type": "json_object"}, {"format": {"type": "json_object"}}),
        (
            {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "object"}, "description": "d"},
            },
            {
                "format": {
                    "type": "json_schema",
                    "name": "response",
                    "description": "d",
                    "schema": {"type": "object"},
                }
            },
        ),
    ],
)
def test_response_format_maps_to_text_format(response_format, expected_text):
    # when
    plan = chat_request_to_responses(body(response_format=response_format, verbosity=None))

    # then
    assert plan.responses_body["text"] == expected_text
    assert plan.tuple_schema is None


def test_tuple_schema_is_kept_in_the_plan_for_the_way_back():
    # given
    schema = {
        "type": "object",
        "properties": {
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]}
        },
    }
    request_body = body(
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
    )

    # when
    plan = chat_request_to_responses(request_body)

    # then
    assert plan.tuple_schema == schema
    assert plan.responses_body["text"]["format"]["schema"]["properties"]["pair"] == {
        "type": "object",
        "properties": {"0": {"type": "string"}, "1": {"type": "number"}},
        "required": ["0", "1"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("effort", "expected_reasoning", "requested"),
    [
        ("minimal", {"effort": "minimal", "summary": "auto"}, True),
        ("none", {"effort": "none", "summary": "auto"}, False),
    ],
)
def test_reasoning_effort(effort, expected_reasoning, requested):
    # when
    plan = chat_request_to_responses(body(reasoning_effort=effort))

    # then
    assert plan.responses_body["reasoning"] == expected_reasoning
    assert plan.reasoning_requested is requested


def test_explicit_prompt_cache_key_wins_over_user():
    # when
    plan = chat_request_to_responses(body(user="end-user-1", prompt_cache_key="conversation-9"))

    # then
    assert plan.responses_body["prompt_cache_key"] == "conversation-9"
    assert plan.dropped_fields == ("user",)


def test_web_search_options_become_a_web_search_tool_with_a_flat_location():
    # given
    options = {
        "search_context_size": "medium",
        "user_location": {"type": "approximate", "approximate": {"city": "Lyon", "country": "FR"}},
    }

    # when
    plan = chat_request_to_responses(body(web_search_options=options))

    # then
    assert plan.responses_body["tools"] == [
        {
            "type": "web_search",
            "search_context_size": "medium",
            "user_location": {"type": "approximate", "city": "Lyon", "country": "FR"},
        }
    ]


def test_only_system_messages_give_instructions_and_an_empty_input_list():
    # when
    plan = chat_request_to_responses(
        {"model": "gpt-5.4", "messages": [{"role": "developer", "content": "Rules."}]}
    )

    # then
    assert plan.responses_body["instructions"] == "Rules."
    assert plan.responses_body["input"] == []
