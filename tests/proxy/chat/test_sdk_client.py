"""The official `openai` SDK against a stand-in chat view built on this library.

The view is the smallest caller there can be (translate the SDK's body, replay a fixture's
upstream events through one translator, answer JSON or SSE); transport is an in-process
`httpx.MockTransport`, so nothing leaves the process. Assertions are on the SDK's objects.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from pydantic import BaseModel

from proxy.chat import ChatRequestInvalid, ChatStreamTranslator, chat_request_to_responses
from tests.proxy.chat.support import (
    COMPLETION_ID,
    CREATED,
    FIXTURE_NAMES,
    load_fixture,
    server_sent_events,
)


class StandInChatView:
    """Answers `POST /v1/chat/completions` from canned upstream events; records every plan."""

    def __init__(self, *event_sequences: list[dict]) -> None:
        self._event_sequences = list(event_sequences)
        self.plans = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/chat/completions"
        try:
            plan = chat_request_to_responses(json.loads(request.content))
        except ChatRequestInvalid as error:
            return httpx.Response(error.status_code, json=error.envelope())
        self.plans.append(plan)
        translator = ChatStreamTranslator(plan, COMPLETION_ID, CREATED, plan.requested_model)
        chunks = []
        for event in self._event_sequences.pop(0):
            chunks.extend(translator.feed(event["type"], event))
        if plan.stream:
            body = server_sent_events(chunks + translator.finish())
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=translator.completion())


def client_for(view: StandInChatView) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk_test",
        base_url="http://proxy.test/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(view)),
    )


SUCCESSFUL_FIXTURES = [name for name in FIXTURE_NAMES if name != "failed"]


@pytest.mark.parametrize("name", SUCCESSFUL_FIXTURES)
def test_sdk_stream_accumulates_to_the_same_message_as_the_non_stream_call(name):
    # given
    fixture = load_fixture(name)
    view = StandInChatView(fixture["events"], fixture["events"])
    client = client_for(view)

    # when
    non_stream = client.chat.completions.create(**fixture["request"])
    state = ChatCompletionStreamState()
    streaming_request = {**fixture["request"], "stream_options": {"include_usage": True}}
    stream_chunks = list(client.chat.completions.create(**streaming_request, stream=True))
    for chunk in stream_chunks:
        state.handle_chunk(chunk)
    # The snapshot, not get_final_completion(): that one raises on length / content_filter.
    streamed = state.current_completion_snapshot

    # then
    expected = fixture["completion"]
    assert non_stream.choices[0].message.content == expected["message"]["content"]
    for completion in (non_stream, streamed):
        choice = completion.choices[0]
        assert completion.id == COMPLETION_ID
        assert choice.finish_reason == expected["finish_reason"]
        assert choice.message.content == expected["message"]["content"]
        assert choice.message.refusal == expected["message"]["refusal"]
        # The wire fields only: the stream snapshot adds SDK-side `index` / `parsed_arguments`.
        tool_calls = [
            {
                "id": call.id,
                "type": call.type,
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in choice.message.tool_calls or []
        ]
        assert tool_calls == expected["message"].get("tool_calls", [])
        assert getattr(choice.message, "reasoning_content", None) == expected["message"].get(
            "reasoning_content"
        )
    assert non_stream.usage.model_dump(exclude_unset=True) == expected["usage"]
    assert stream_chunks[-1].usage.model_dump(exclude_unset=True) == expected["usage"]
    assert stream_chunks[0].choices[0].delta.role == "assistant"
    assert [plan.stream for plan in view.plans] == [False, True]


def test_sdk_stream_raises_api_error_on_an_upstream_failure_after_partial_output():
    # given
    fixture = load_fixture("failed")
    client = client_for(StandInChatView(fixture["events"]))
    received = []

    # when
    with pytest.raises(openai.APIError) as raised:
        for chunk in client.chat.completions.create(**fixture["request"], stream=True):
            received.append(chunk)

    # then
    assert raised.value.message == fixture["completion"]["message"]
    assert raised.value.body == {
        "message": fixture["completion"]["message"],
        "type": "server_error",
        "param": None,
        "code": "server_error",
    }
    assert [chunk.choices[0].delta.content for chunk in received] == ["", "Let me think about"]
    assert all(chunk.choices[0].finish_reason is None for chunk in received)


def test_sdk_sees_a_rejected_request_as_bad_request_error():
    # given
    client = client_for(StandInChatView())

    # when
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "Hi"}], n=3
        )

    # then
    assert raised.value.status_code == 400
    assert raised.value.code == "unsupported_value"
    assert raised.value.param == "n"


class LocatedLabel(BaseModel):
    point: tuple[int, int]
    label: str


def test_sdk_parse_with_a_tuple_field_round_trips_through_the_rewritten_schema():
    # given: upstream events answering with the index-keyed object of the rewritten schema
    fixture = load_fixture("json_schema_tuple")
    view = StandInChatView(fixture["events"])
    client = client_for(view)

    # when
    completion = client.chat.completions.parse(
        model="gpt-5.4",
        messages=[{"role": "user", "content": "Where is the label?"}],
        response_format=LocatedLabel,
    )

    # then
    assert completion.choices[0].message.parsed == LocatedLabel(point=(3, 4), label="north-east")
    upstream_format = view.plans[0].responses_body["text"]["format"]
    assert upstream_format["name"] == "LocatedLabel"
    assert upstream_format["strict"] is True
    assert upstream_format["schema"]["properties"]["point"] == {
        "type": "object",
        "title": "Point",
        "properties": {"0": {"type": "integer"}, "1": {"type": "integer"}},
        "required": ["0", "1"],
        "additionalProperties": False,
    }


def test_sdk_tool_call_round_trip_sends_the_call_and_its_output_upstream():
    # given: first the model calls get_weather, then it answers from the tool output
    call_events = load_fixture("function_call_single")["events"]
    answer_events = load_fixture("tool_round_trip")["events"]
    view = StandInChatView(call_events, answer_events)
    client = client_for(view)
    tools = load_fixture("tool_round_trip")["request"]["tools"]
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]

    # when
    first = client.chat.completions.create(model="gpt-5.4", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    messages.append(first.choices[0].message.model_dump(exclude_unset=True, exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c":18}'})
    second = client.chat.completions.create(model="gpt-5.4", messages=messages, tools=tools)

    # then
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, call.function.arguments) == (
        "get_weather",
        '{"city":"Paris","unit":"c"}',
    )
    assert view.plans[1].responses_body["input"][1:] == [
        {
            "type": "function_call",
            "call_id": call.id,
            "name": "get_weather",
            "arguments": '{"city":"Paris","unit":"c"}',
        },
        {"type": "function_call_output", "call_id": call.id, "output": '{"temperature_c":18}'},
    ]
    assert second.choices[0].message.content == "It is 18 °C and cloudy in Paris."
    assert second.choices[0].finish_reason == "stop"
