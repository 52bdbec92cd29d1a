"""The OpenAI-compatible surface (issue 8): chat completions, compact, models — driven by the
official ``openai`` package against the fake upstream; assertions on the SDK's own objects."""

from __future__ import annotations

import json

import openai
import pytest
import requests
from pydantic import BaseModel

from proxy.models import Account, RuntimeSettings
from telemetry.models import OpsErrorLog, UsageRecord
from tests.fakes.codex import Reply, function_call_events
from tests.proxy.conftest import make_pool_account


def test_chat_completion_non_streaming(sdk, proxy, upstream):
    completion = sdk.chat.completions.create(
        model="gpt-5.4",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello?"},
        ],
    )

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "Hello from the fake upstream."
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 5)
    sent = upstream.responses_requests()[0].json()
    assert sent["instructions"] == "Be brief." and sent["stream"] is True
    proxy.drain()
    record = UsageRecord.objects.get()
    assert (record.route, record.requested_model) == ("/v1/chat/completions", "gpt-5.4")
    assert record.metadata_json["apiKind"] == "chat"


def test_chat_completion_streaming_with_usage(sdk, proxy):
    stream = sdk.chat.completions.create(
        model="gpt-5.4",
        messages=[{"role": "user", "content": "Hello?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Hello from the fake upstream."
    assert len({chunk.id for chunk in chunks}) == 1
    finish = [
        chunk.choices[0].finish_reason
        for chunk in chunks
        if chunk.choices and chunk.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 17


def test_tool_call_round_trip(sdk, upstream):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    upstream.program(
        "tok-sdk",
        Reply(
            events=function_call_events(
                name="get_weather",
                arguments='{"city":"Paris"}',
                model="gpt-5.4",
                call_id="call_abc",
            )
        ),
        Reply(text="It is sunny in Paris."),
    )
    messages = [{"role": "user", "content": "Weather in Paris?"}]

    first = sdk.chat.completions.create(model="gpt-5.4", messages=messages, tools=tools)
    [call] = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_abc",
        "get_weather",
        {"city": "Paris"},
    )

    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = sdk.chat.completions.create(model="gpt-5.4", messages=messages, tools=tools)

    assert second.choices[0].message.content == "It is sunny in Paris."
    sent = upstream.responses_requests()[1].json()
    kinds = [item.get("type", "message") for item in sent["input"]]
    assert kinds == ["message", "function_call", "function_call_output"]
    assert sent["input"][1]["call_id"] == "call_abc" and sent["input"][2]["output"] == "sunny"
    assert sent["tools"][0]["name"] == "get_weather"


def test_tool_call_streaming_deltas(sdk, upstream):
    upstream.program(
        "tok-sdk",
        Reply(
            events=function_call_events(
                name="lookup", arguments='{"q":"x"}', model="gpt-5.4", call_id="call_s"
            )
        ),
    )

    with sdk.chat.completions.stream(
        model="gpt-5.4",
        messages=[{"role": "user", "content": "look it up"}],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
            }
        ],
    ) as stream:
        final = stream.get_final_completion()

    [call] = final.choices[0].message.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_s",
        "lookup",
        '{"q":"x"}',
    )
    assert final.choices[0].finish_reason == "tool_calls"


def test_response_format_json_schema(sdk, upstream):
    class Point(BaseModel):
        x: int
        y: int

    upstream.program("tok-sdk", Reply(text='{"x": 3, "y": 4}'))

    parsed = sdk.chat.completions.parse(
        model="gpt-5.4", messages=[{"role": "user", "content": "a point"}], response_format=Point
    )

    assert parsed.choices[0].message.parsed == Point(x=3, y=4)
    text_format = upstream.responses_requests()[0].json()["text"]["format"]
    assert text_format["type"] == "json_schema" and text_format["name"] == "Point"
    assert text_format["schema"]["properties"] == {
        "x": {"title": "X", "type": "integer"},
        "y": {"title": "Y", "type": "integer"},
    }


def test_models_list_includes_aliases(sdk):
    RuntimeSettings.objects.update(model_aliases_json={"fast": "gpt-5.4-mini"})

    ids = [model.id for model in sdk.models.list()]

    assert ids[:8] == [
        "gpt-5.5",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.3-codex",
        "gpt-5.3-codex-spark",
        "codex-auto-review",
        "gpt-5.2",
        "gpt-image-1",
    ]
    assert ids[-1] == "fast"
    assert sdk.models.retrieve("fast").id == "fast"
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("no-such-model")


def test_model_catalog_and_info(proxy, client_key):
    RuntimeSettings.objects.update(model_aliases_json={"fast": "gpt-5.4-mini"})
    headers = {"Authorization": f"Bearer {client_key.key}"}

    catalog = requests.get(f"{proxy.url}/v1/models/catalog", headers=headers, timeout=10).json()
    info = requests.get(f"{proxy.url}/v1/models/fast/info", headers=headers, timeout=10).json()

    assert (
        catalog[0]["id"] == "gpt-5.5"
        and catalog[0]["isDefault"] is True
        and catalog[0]["source"] == "builtin"
    )
    assert info["id"] == "gpt-5.4-mini" and info["defaultReasoningEffort"] == "medium"
    assert requests.get(f"{proxy.url}/v1/models/catalog", timeout=10).status_code == 401
    assert (
        requests.get(f"{proxy.url}/v1/models/nope/info", headers=headers, timeout=10).status_code
        == 404
    )


def test_chat_stream_cut_midway_ends_with_an_error_chunk_and_done(sdk, proxy, upstream, client_key):
    upstream.program("tok-sdk", Reply(kind="cut", cut_after=6, deltas=5))

    response = requests.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "gpt-5.4", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    frames = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert len(frames) >= 3, response.text
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["code"] == "stream_disconnected"
    assert error["message"].startswith("Upstream stream closed before response.completed")
    assert json.loads(frames[0])["choices"][0]["delta"]["role"] == "assistant"
    proxy.drain()
    row = OpsErrorLog.objects.get(route="/v1/chat/completions")
    assert (row.message, row.failure_class, row.status_code) == (
        "v1 responses stream failed",
        "missing_completed",
        502,
    )
    assert row.metadata_json["synthetic"] is True and row.metadata_json["apiKind"] == "chat"


def test_the_sdk_raises_on_a_cut_chat_stream(sdk, upstream):
    upstream.program("tok-sdk", Reply(kind="cut", cut_after=6, deltas=5))

    with pytest.raises(openai.APIError, match="Upstream stream closed"):
        list(
            sdk.chat.completions.create(
                model="gpt-5.4", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )


def test_chat_rejects_untranslatable_requests(sdk):
    with pytest.raises(openai.BadRequestError) as raised:
        sdk.chat.completions.create(
            model="gpt-5.4", messages=[{"role": "user", "content": "hi"}], n=2
        )

    assert raised.value.status_code == 400


def test_compact_returns_the_upstream_json_verbatim(proxy, upstream, client_key):
    make_pool_account("tok-c")
    upstream.compact_payload = {
        "id": "resp_compact_1",
        "object": "response.compaction",
        "output": [{"type": "compaction", "encrypted_content": "enc"}],
        "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60},
    }

    response = requests.post(
        f"{proxy.url}/v1/responses/compact",
        json={
            "model": "gpt-5.4",
            "stream": True,
            "use_websocket": True,
            "input": [],
            "session_id": "s-1",
        },
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code == 200
    assert response.json() == upstream.compact_payload
    [sent] = upstream.server.requests_to("/codex/responses/compact")
    body = sent.json()
    assert "stream" not in body and "use_websocket" not in body
    assert body["session_id"].startswith("wi_")
    assert body["client_metadata"]["session_id"] == body["session_id"]
    assert set(body["client_metadata"]) >= {"x-codex-installation-id", "x-client-request-id"}
    assert sent.header("accept") is None
    proxy.drain()
    record = UsageRecord.objects.get()
    assert (record.route, record.transport, record.message) == (
        "/v1/responses/compact",
        "http",
        "v1 responses compact completed",
    )
    assert (record.input_tokens, record.output_tokens) == (50, 10)


def test_a_compact_success_syncs_the_quota_and_keeps_the_upstream_request_id(
    proxy, upstream, client_key
):
    account = make_pool_account("tok-c")
    upstream.program(
        "tok-c",
        Reply(
            headers={
                "x-openai-request-id": "upstream-compact-7",
                "x-codex-primary-used-percent": "30",
                "x-codex-primary-window-minutes": "300",
                "x-codex-plan-type": "plus",
            }
        ),
    )

    response = requests.post(
        f"{proxy.url}/v1/responses/compact",
        json={"model": "gpt-5.4", "input": [], "reasoning": {"effort": "low"}},
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )
    proxy.drain()

    assert response.status_code == 200
    record = UsageRecord.objects.get()
    assert record.upstream_request_id == "upstream-compact-7"
    assert record.metadata_json["reasoningEffort"] == "low"
    stored = Account.objects.get(pk=account.pk)
    assert stored.plan_type == "plus"
    assert stored.quota_json["snapshots"][0]["primary"]["used_percent"] == 30.0
    assert (stored.status, stored.quota_limit_reached) == ("active", False)


def test_compact_non_json_answer_is_a_502(proxy, upstream, client_key):
    make_pool_account("tok-c")
    upstream.program("tok-c", Reply(kind="status", status=200, body="<html>oops</html>"))

    response = requests.post(
        f"{proxy.url}/v1/responses/compact",
        json={"model": "gpt-5.4", "input": []},
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
