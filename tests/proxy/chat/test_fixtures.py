"""Table-driven translation tests over realistic request / upstream-stream fixtures.

Each fixture is checked field by field: the upstream body, the stream chunks (with and without
`include_usage`), the non-stream object from the events and from the terminal response alone,
and every produced dict against the `openai` SDK's own types.
"""

from __future__ import annotations

import json

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.chat import ChatUpstreamFailed
from tests.proxy.chat.support import (
    ALLOWED_EXTRA_KEYS,
    FIXTURE_NAMES,
    expected_chunks,
    expected_completion,
    extra_keys,
    load_fixture,
    plan_for,
    translate_events,
)

TERMINAL_EVENTS = {"response.completed", "response.incomplete", "response.failed"}
ID_PREFIXES = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}


def test_the_fixture_table_covers_every_scenario_of_the_issue():
    assert FIXTURE_NAMES == [
        "content_filter",
        "empty_output",
        "failed",
        "function_call_parallel",
        "function_call_single",
        "image_generation",
        "images",
        "json_schema_tuple",
        "legacy_functions",
        "length_cutoff",
        "reasoning_summary",
        "refusal",
        "text_multi_delta",
        "text_plain",
        "tool_round_trip",
        "web_search_citation",
    ]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_events_look_like_a_real_responses_stream(name):
    # given
    events = load_fixture(name)["events"]

    # then: numbered from 0, opened by created/in_progress, closed by one terminal event
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert [event["type"] for event in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] in TERMINAL_EVENTS
    assert not any(event["type"] in TERMINAL_EVENTS for event in events[:-1])
    response_ids = {event["response"]["id"] for event in events if "response" in event}
    assert len(response_ids) == 1 and response_ids.pop().startswith("resp_")
    for event in events:
        item = event.get("item")
        if item and item["type"] in ID_PREFIXES:
            assert item["id"].startswith(ID_PREFIXES[item["type"]])
        if item and item["type"] == "function_call":
            assert item["call_id"].startswith("call_")


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_request_becomes_the_expected_upstream_body(name):
    # given
    fixture = load_fixture(name)

    # when
    plan = plan_for(fixture, stream=False)

    # then: same content and the same (deliberate) key order at every level
    assert plan.responses_body == fixture["upstream_body"]
    assert json.dumps(plan.responses_body) == json.dumps(fixture["upstream_body"])
    assert plan.dropped_fields == tuple(fixture["dropped_fields"])
    assert plan.requested_model == fixture["request"]["model"]
    assert plan.reasoning_requested is fixture["reasoning_requested"]
    assert (plan.stream, plan.include_usage) == (False, False)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_stream_with_usage_gives_the_expected_chunks(name):
    # given
    fixture = load_fixture(name)
    model = fixture["request"]["model"]
    plan = plan_for(fixture, stream=True, include_usage=True)

    # when
    _, chunks = translate_events(plan, fixture["events"], model)

    # then
    assert (plan.stream, plan.include_usage) == (True, True)
    assert chunks == expected_chunks(fixture["stream"], model, include_usage=True)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_stream_without_usage_has_no_usage_field_or_usage_chunk(name):
    # given
    fixture = load_fixture(name)
    model = fixture["request"]["model"]
    plan = plan_for(fixture, stream=True)

    # when
    _, chunks = translate_events(plan, fixture["events"], model)

    # then
    assert chunks == expected_chunks(fixture["stream"], model, include_usage=False)
    assert not any("usage" in chunk for chunk in chunks)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_stream_chunk_is_a_valid_sdk_chunk_without_unknown_fields(name):
    # given
    fixture = load_fixture(name)
    plan = plan_for(fixture, stream=True, include_usage=True)

    # when
    _, chunks = translate_events(plan, fixture["events"], fixture["request"]["model"])

    # then
    assert chunks
    for chunk in chunks:
        parsed = ChatCompletionChunk.model_validate(chunk)
        assert extra_keys(parsed) <= ALLOWED_EXTRA_KEYS
        assert parsed.model_dump(mode="json", exclude_unset=True) == chunk


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_non_stream_completion_from_the_events(name):
    # given
    fixture = load_fixture(name)
    model = fixture["request"]["model"]
    plan = plan_for(fixture, stream=False)
    expectation = fixture["completion"]

    # when
    translator, chunks = translate_events(plan, fixture["events"], model)

    # then: a non-stream plan never produces chunks
    assert chunks == []
    if "raises" in expectation:
        with pytest.raises(ChatUpstreamFailed) as raised:
            translator.completion()
        assert (raised.value.message, raised.value.code) == (
            expectation["message"],
            expectation["code"],
        )
        return
    completion = translator.completion()
    assert completion == expected_completion(expectation, model)
    parsed = ChatCompletion.model_validate(completion)
    assert extra_keys(parsed) <= ALLOWED_EXTRA_KEYS
    assert parsed.model_dump(mode="json", exclude_unset=True) == completion


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_non_stream_completion_from_the_terminal_response_alone_matches(name):
    # given: only the terminal event (the fallback when no deltas were kept)
    fixture = load_fixture(name)
    model = fixture["request"]["model"]
    plan = plan_for(fixture, stream=False)
    terminal = fixture["events"][-1]
    expectation = fixture["completion"]

    # when
    translator, _ = translate_events(plan, [terminal], model)

    # then
    if "raises" in expectation:
        with pytest.raises(ChatUpstreamFailed) as raised:
            translator.completion()
        assert raised.value.code == expectation["code"]
        assert raised.value.error == terminal["response"]["error"]
        return
    assert translator.completion() == expected_completion(expectation, model)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_translator_reports_the_upstream_facts(name):
    # given
    fixture = load_fixture(name)
    terminal = fixture["events"][-1]
    plan = plan_for(fixture, stream=True)

    # when
    translator, _ = translate_events(plan, fixture["events"], fixture["request"]["model"])

    # then
    assert translator.response_id == terminal["response"]["id"]
    assert translator.status == terminal["response"]["status"]
    assert translator.usage == terminal["response"]["usage"]
    assert translator.failure == terminal["response"]["error"]
    assert translator.has_sent_output is True
