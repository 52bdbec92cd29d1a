"""The official `openai` SDK against the running proxy's `/v1/chat/completions`.

The fake Codex upstream replays each fixture's Responses events as real SSE, so every request
goes through the real view, dispatcher and translator. Assertions are on the SDK's objects, on
what reached the upstream, and on the ledger.
"""

from __future__ import annotations

import re

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from pydantic import BaseModel

from telemetry.models import UsageRecord
from tests.fakes.codex import Reply, text_events
from tests.proxy.chat.support import FIXTURE_NAMES, load_fixture
from tests.proxy.conftest import make_pool_account

TOKEN = "tok-chat-sdk"
COMPLETION_ID = re.compile(r"chatcmpl-[0-9a-f]{24}")
# "failed" ends in an error, and the proxy answers a non-stream "empty_output" by trying the
# next account (spec §3.6): both have tests of their own below.
SUCCESSFUL_FIXTURES = [name for name in FIXTURE_NAMES if name not in ("failed", "empty_output")]


@pytest.fixture
def client(proxy, upstream, client_key) -> openai.OpenAI:
    make_pool_account(TOKEN)
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=client_key.key, max_retries=0)


def answer_with(upstream, *event_sequences: list[dict]) -> None:
    """Have the fake upstream answer the next requests with these events, in order."""
    upstream.program(TOKEN, *(Reply(events=events) for events in event_sequences))


def sent_upstream(upstream) -> list[dict]:
    """The Responses bodies the proxy sent upstream, in order."""
    return [request.json() for request in upstream.responses_requests()]


def streamed(client: openai.OpenAI, request: dict) -> tuple[list, object]:
    """Stream `request` with usage; return the chunks and the SDK's accumulated completion."""
    state = ChatCompletionStreamState()
    streaming_request = {**request, "stream_options": {"include_usage": True}}
    chunks = list(client.chat.completions.create(**streaming_request, stream=True))
    for chunk in chunks:
        state.handle_chunk(chunk)
    # The snapshot, not get_final_completion(): that one raises on length / content_filter.
    return chunks, state.current_completion_snapshot


@pytest.mark.parametrize("name", SUCCESSFUL_FIXTURES)
def test_sdk_stream_accumulates_to_the_same_message_as_the_non_stream_call(
    name, client, upstream, proxy
):
    # given
    fixture = load_fixture(name)
    answer_with(upstream, fixture["events"], fixture["events"])

    # when
    non_stream = client.chat.completions.create(**fixture["request"])
    stream_chunks, accumulated = streamed(client, fixture["request"])

    # then
    expected = fixture["completion"]
    assert non_stream.choices[0].message.content == expected["message"]["content"]
    for completion in (non_stream, accumulated):
        choice = completion.choices[0]
        assert COMPLETION_ID.fullmatch(completion.id)
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
    assert {chunk.id for chunk in stream_chunks} == {accumulated.id}
    assert non_stream.usage.model_dump(exclude_unset=True) == expected["usage"]
    assert stream_chunks[-1].usage.model_dump(exclude_unset=True) == expected["usage"]
    assert stream_chunks[0].choices[0].delta.role == "assistant"
    proxy.drain()
    records = UsageRecord.objects.order_by("created_at", "id")
    assert [record.metadata_json["stream"] for record in records] == [False, True]


def test_sdk_stream_raises_api_error_on_an_upstream_failure_after_partial_output(client, upstream):
    # given
    fixture = load_fixture("failed")
    answer_with(upstream, fixture["events"])
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


def test_sdk_an_upstream_answer_with_nothing_in_it(client, upstream):
    # given: the upstream completes with no output and no output tokens, twice
    fixture = load_fixture("empty_output")
    answer_with(upstream, fixture["events"], fixture["events"])

    # when
    stream_chunks, accumulated = streamed(client, fixture["request"])
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(**fixture["request"])

    # then: a stream has already started, so it says so in the content; a non-stream request
    # moves on to the next account and, with none left, fails (spec §3.6)
    expected = fixture["completion"]
    assert accumulated.choices[0].message.content == expected["message"]["content"]
    assert accumulated.choices[0].finish_reason == expected["finish_reason"]
    assert stream_chunks[-1].usage.model_dump(exclude_unset=True) == expected["usage"]
    assert raised.value.status_code == 502
    assert raised.value.body["code"] == "invalid_upstream_response"


def test_sdk_sees_a_rejected_request_as_bad_request_error(client, upstream):
    # when
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "Hi"}], n=3
        )

    # then
    assert raised.value.status_code == 400
    assert raised.value.code == "unsupported_value"
    assert raised.value.param == "n"
    assert upstream.responses_requests() == []


class LocatedLabel(BaseModel):
    point: tuple[int, int]
    label: str


def test_sdk_parse_with_a_tuple_field_round_trips_through_the_rewritten_schema(client, upstream):
    # given: upstream events answering with the index-keyed object of the rewritten schema
    answer_with(upstream, load_fixture("json_schema_tuple")["events"])

    # when
    completion = client.chat.completions.parse(
        model="gpt-5.4",
        messages=[{"role": "user", "content": "Where is the label?"}],
        response_format=LocatedLabel,
    )

    # then
    assert completion.choices[0].message.parsed == LocatedLabel(point=(3, 4), label="north-east")
    upstream_format = sent_upstream(upstream)[0]["text"]["format"]
    assert upstream_format["name"] == "LocatedLabel"
    assert upstream_format["strict"] is True
    assert upstream_format["schema"]["properties"]["point"] == {
        "type": "object",
        "title": "Point",
        "properties": {"0": {"type": "integer"}, "1": {"type": "integer"}},
        "required": ["0", "1"],
        "additionalProperties": False,
    }


def test_sdk_tool_call_round_trip_sends_the_call_and_its_output_upstream(client, upstream):
    # given: first the model calls get_weather, then it answers from the tool output
    answer_with(
        upstream,
        load_fixture("function_call_single")["events"],
        load_fixture("tool_round_trip")["events"],
    )
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
    assert sent_upstream(upstream)[1]["input"][1:] == [
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


def test_non_stream_content_is_the_streamed_text_when_the_completed_output_is_empty(
    client, upstream
):
    # given: text deltas, then a response.completed whose output is empty (as the Codex
    # backend sends it) though it counts the output tokens
    events = [
        event
        for event in text_events(text="Hello", deltas=2, model="gpt-5.4")
        if not event["type"].endswith(".done")
    ]
    events[-1]["response"]["output"] = []
    assert events[-1]["response"]["usage"]["output_tokens"] > 0
    answer_with(upstream, events)

    # when
    completion = client.chat.completions.create(
        model="gpt-5.4", messages=[{"role": "user", "content": "Hi"}]
    )

    # then
    assert completion.choices[0].message.content == "Hello"
    assert completion.choices[0].finish_reason == "stop"
