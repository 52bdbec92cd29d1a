"""Stream translation beyond the fixtures: cut streams, error frames, lazy role, odd upstreams."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletionChunk

from proxy.chat import (
    ChatStreamTranslator,
    ChatUpstreamFailed,
    ChatUpstreamTruncated,
    chat_request_to_responses,
)
from tests.proxy.chat.support import (
    COMPLETION_ID,
    CREATED,
    expected_chunks,
    expected_completion,
    load_fixture,
    plan_for,
    translate_events,
)

MODEL = "gpt-5.4"
TRUNCATED = {
    "message": "Upstream stream closed before response.completed",
    "type": "server_error",
    "param": None,
    "code": "stream_disconnected",
}
USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 4,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 14,
}
CHAT_USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 4,
    "total_tokens": 14,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def streaming_plan(**fields):
    return chat_request_to_responses(
        {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True, **fields}
    )


def feed_all(translator, events):
    chunks = []
    for event in events:
        chunks.extend(translator.feed(event["type"], event))
    return chunks


def completed(output, usage=USAGE):
    return {
        "type": "response.completed",
        "response": {"id": "resp_edge", "status": "completed", "output": output, "usage": usage},
    }


def message_item(text):
    return {
        "id": "msg_edge",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "annotations": [], "text": text}],
    }


def function_call_item(arguments, status="completed"):
    return {
        "id": "fc_edge",
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": "call_edge",
        "name": "get_weather",
    }


def test_a_stream_cut_mid_way_ends_with_the_error_frame_and_no_finish_reason():
    # given: the multi-delta stream, cut after its third text delta
    fixture = load_fixture("text_multi_delta")
    events = fixture["events"]
    third_delta = [e["type"] for e in events].index("response.output_text.delta") + 2
    plan = plan_for(fixture, stream=True, include_usage=True)

    # when
    translator, chunks = translate_events(plan, events[: third_delta + 1], MODEL)

    # then
    assert chunks == expected_chunks(
        [
            {"delta": {"role": "assistant", "content": ""}},
            {"delta": {"content": "The"}},
            {"delta": {"content": " capital"}},
            {"delta": {"content": " of"}},
            {"error": TRUNCATED},
        ],
        MODEL,
        include_usage=True,
    )
    ChatCompletionChunk.model_validate(chunks[-1])
    assert translator.status is None
    with pytest.raises(ChatUpstreamTruncated) as raised:
        translator.completion()
    assert (raised.value.message, raised.value.code) == (TRUNCATED["message"], TRUNCATED["code"])


def test_error_chunks_for_a_read_error_close_the_stream_for_good():
    # given
    fixture = load_fixture("text_plain")
    translator = ChatStreamTranslator(plan_for(fixture, stream=True), COMPLETION_ID, CREATED, MODEL)
    sent = feed_all(translator, fixture["events"][:5])

    # when
    error = translator.error_chunks("Upstream read timed out after 300 s", "upstream_timeout")
    after = translator.finish() + feed_all(translator, fixture["events"][5:])

    # then
    assert sent == expected_chunks(
        [
            {"delta": {"role": "assistant", "content": ""}},
            {"delta": {"content": "Hello! How can I help you today?"}},
        ],
        MODEL,
        include_usage=False,
    )
    assert error == [
        {
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": MODEL,
            "choices": [],
            "error": {
                "message": "Upstream read timed out after 300 s",
                "type": "server_error",
                "param": None,
                "code": "upstream_timeout",
            },
        }
    ]
    assert after == []
    assert translator.error_chunks("again") == []


def test_structural_events_send_nothing_so_an_early_failure_can_still_fail_over():
    # given
    translator = ChatStreamTranslator(streaming_plan(), COMPLETION_ID, CREATED, MODEL)
    structural = [
        {"type": "response.created", "response": {"id": "resp_early", "status": "in_progress"}},
        {"type": "response.in_progress", "response": {"id": "resp_early"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []},
        },
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": ""},
        {"type": "codex.rate_limits", "rate_limits": {}},
    ]

    # when
    chunks = feed_all(translator, structural)

    # then
    assert chunks == []
    assert translator.has_sent_output is False
    assert translator.response_id == "resp_early"


def test_an_error_event_ends_the_stream_with_its_message_and_code():
    # given
    translator = ChatStreamTranslator(streaming_plan(), COMPLETION_ID, CREATED, MODEL)
    error_event = {
        "type": "error",
        "sequence_number": 3,
        "code": "rate_limit_exceeded",
        "message": "Rate limit reached for gpt-5.4. Please try again in 20s.",
        "param": None,
    }

    # when
    chunks = feed_all(translator, [error_event]) + translator.finish()

    # then
    assert chunks == expected_chunks(
        [
            {
                "error": {
                    "message": "Rate limit reached for gpt-5.4. Please try again in 20s.",
                    "type": "server_error",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            }
        ],
        MODEL,
        include_usage=False,
    )
    assert translator.status == "failed"
    with pytest.raises(ChatUpstreamFailed) as raised:
        translator.completion()
    assert raised.value.code == "rate_limit_exceeded"
    assert raised.value.error == error_event


def test_a_nested_error_event_and_a_failed_response_without_details_get_defaults():
    # given
    nested = ChatStreamTranslator(streaming_plan(), COMPLETION_ID, CREATED, MODEL)
    bare = ChatStreamTranslator(streaming_plan(), COMPLETION_ID, CREATED, MODEL)

    # when
    nested_chunks = feed_all(nested, [{"type": "error", "error": {"message": "Busy"}}])
    nested_chunks += nested.finish()
    bare_chunks = feed_all(bare, [{"type": "response.failed", "response": {"id": "resp_x"}}])
    bare_chunks += bare.finish()

    # then
    assert nested_chunks[0]["error"] == {
        "message": "Busy",
        "type": "server_error",
        "param": None,
        "code": "response_failed",
    }
    assert bare_chunks[0]["error"] == {
        "message": "Upstream Codex response failed",
        "type": "server_error",
        "param": None,
        "code": "response_failed",
    }


def test_reasoning_is_hidden_when_the_client_did_not_request_it():
    # given: the reasoning fixture's events, for a request without reasoning_effort
    fixture = load_fixture("reasoning_summary")
    request = {key: value for key, value in fixture["request"].items() if key != "reasoning_effort"}
    stream_plan = chat_request_to_responses({**request, "stream": True})
    plain_plan = chat_request_to_responses(request)

    # when
    _, chunks = translate_events(stream_plan, fixture["events"], MODEL)
    translator, _ = translate_events(plain_plan, fixture["events"], MODEL)

    # then
    assert chunks == expected_chunks(
        [
            {"delta": {"role": "assistant", "content": ""}},
            {"delta": {"content": "No"}},
            {"delta": {"content": ": 1001 = 7 × 11 × 13."}},
            {"delta": {}, "finish_reason": "stop"},
        ],
        MODEL,
        include_usage=False,
    )
    assert "reasoning_content" not in translator.completion()["choices"][0]["message"]


@pytest.mark.parametrize(
    ("events", "text", "arguments"),
    [
        pytest.param(
            [
                {"type": "response.output_item.added", "output_index": 0, "item": message_item("")},
                {
                    "type": "response.output_item.done",
                    "output_index": 0,
                    "item": message_item("Sure."),
                },
                {
                    "type": "response.output_item.added",
                    "output_index": 1,
                    "item": function_call_item("", "in_progress"),
                },
                {
                    "type": "response.output_item.done",
                    "output_index": 1,
                    "item": function_call_item('{"city":"Oslo"}'),
                },
                completed([message_item("Sure."), function_call_item('{"city":"Oslo"}')]),
            ],
            "Sure.",
            '{"city":"Oslo"}',
            id="items-arrive-whole",
        ),
        pytest.param(
            [
                {
                    "type": "response.created",
                    "response": {"id": "resp_edge", "status": "in_progress"},
                },
                completed([message_item("Only here."), function_call_item('{"city":"Rome"}')]),
            ],
            "Only here.",
            '{"city":"Rome"}',
            id="only-the-terminal-response",
        ),
    ],
)
def test_an_upstream_without_deltas_still_delivers_text_and_arguments(events, text, arguments):
    # given: no deltas at all; the output comes in whole items or only in the terminal response
    translator = ChatStreamTranslator(streaming_plan(), COMPLETION_ID, CREATED, MODEL)

    # when
    chunks = feed_all(translator, events) + translator.finish()

    # then
    start = {
        "index": 0,
        "id": "call_edge",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert chunks == expected_chunks(
        [
            {"delta": {"role": "assistant", "content": ""}},
            {"delta": {"content": text}},
            {"delta": {"tool_calls": [start]}},
            {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}},
            {"delta": {}, "finish_reason": "tool_calls"},
        ],
        MODEL,
        include_usage=False,
    )


def test_text_before_a_tool_call_keeps_both_and_finishes_with_tool_calls():
    # given
    plan = chat_request_to_responses(
        {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
    )
    translator = ChatStreamTranslator(plan, COMPLETION_ID, CREATED, MODEL)
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": message_item("")},
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_edge",
            "delta": "Let me check.",
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": function_call_item("", "in_progress"),
        },
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 1,
            "item_id": "fc_edge",
            "delta": '{"city":"Oslo"}',
        },
        completed([], usage=None),
    ]

    # when
    feed_all(translator, events)
    completion = translator.completion()

    # then: output rebuilt from deltas (the terminal output was empty); no usage was reported
    assert completion == {
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "refusal": None,
                    "annotations": [],
                    "tool_calls": [
                        {
                            "id": "call_edge",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
    }


def test_no_usage_chunk_when_the_upstream_reported_no_usage():
    # given
    translator = ChatStreamTranslator(
        streaming_plan(stream_options={"include_usage": True}), COMPLETION_ID, CREATED, MODEL
    )

    # when
    chunks = feed_all(translator, [completed([message_item("Hi.")], usage=None)])
    chunks += translator.finish()

    # then
    assert chunks == expected_chunks(
        [
            {"delta": {"role": "assistant", "content": ""}},
            {"delta": {"content": "Hi."}},
            {"delta": {}, "finish_reason": "stop"},
        ],
        MODEL,
        include_usage=True,
    )


def test_an_incomplete_response_with_no_text_is_cut_not_empty():
    # given
    translator = ChatStreamTranslator(streaming_plan(), COMPLETION_ID, CREATED, MODEL)
    incomplete = {
        "type": "response.incomplete",
        "response": {
            "id": "resp_edge",
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"id": "rs_edge", "type": "reasoning", "summary": []}],
            "usage": USAGE,
        },
    }

    # when
    chunks = feed_all(translator, [incomplete]) + translator.finish()
    completion = translator.completion()

    # then: no "[Error] … empty response" text for a response that was cut
    assert chunks == expected_chunks(
        [
            {"delta": {"role": "assistant", "content": None}},
            {"delta": {}, "finish_reason": "length"},
        ],
        MODEL,
        include_usage=False,
    )
    assert completion == expected_completion(
        {
            "message": {"role": "assistant", "content": None, "refusal": None, "annotations": []},
            "finish_reason": "length",
            "usage": CHAT_USAGE,
        },
        MODEL,
    )


def test_finish_twice_sends_the_closing_chunks_once():
    # given
    fixture = load_fixture("text_plain")
    translator, chunks = translate_events(plan_for(fixture, stream=True), fixture["events"], MODEL)

    # when
    again = translator.finish()

    # then
    assert len(chunks) == 3
    assert again == []


def test_text_parts_of_several_messages_join_and_citations_shift_with_them():
    # given
    first = message_item("See ")
    second = {
        **message_item("docs."),
        "id": "msg_second",
        "content": [
            {
                "type": "output_text",
                "text": "docs.",
                "annotations": [
                    {
                        "type": "url_citation",
                        "start_index": 0,
                        "end_index": 4,
                        "title": "Docs",
                        "url": "https://example.com/docs",
                    },
                    {"type": "file_citation", "file_id": "file-1", "filename": "a.txt", "index": 0},
                ],
            }
        ],
    }
    plan = chat_request_to_responses(
        {"model": MODEL, "messages": [{"role": "user", "content": "?"}]}
    )
    translator = ChatStreamTranslator(plan, COMPLETION_ID, CREATED, MODEL)

    # when
    feed_all(translator, [completed([first, second])])
    message = translator.completion()["choices"][0]["message"]

    # then
    assert message["content"] == "See docs."
    assert message["annotations"] == [
        {
            "type": "url_citation",
            "url_citation": {
                "start_index": 4,
                "end_index": 8,
                "title": "Docs",
                "url": "https://example.com/docs",
            },
        }
    ]


def test_a_response_that_is_not_finished_cannot_become_a_completion():
    # given: the upstream said it started, and nothing more
    plan = chat_request_to_responses(
        {"model": MODEL, "messages": [{"role": "user", "content": "?"}]}
    )
    translator = ChatStreamTranslator(plan, COMPLETION_ID, CREATED, MODEL)
    started = {"id": "resp_x", "status": "in_progress"}
    feed_all(
        translator,
        [
            {"type": "response.created", "response": started},
            {"type": "response.in_progress", "response": started},
        ],
    )

    # when
    with pytest.raises(ChatUpstreamTruncated) as raised:
        translator.completion()

    # then
    assert (raised.value.message, raised.value.code) == (TRUNCATED["message"], TRUNCATED["code"])
