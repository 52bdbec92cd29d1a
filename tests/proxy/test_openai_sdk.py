"""The official ``openai`` package pointed at the proxy, as a developer would use it."""

from __future__ import annotations

import openai
import pytest
from openai.types.responses import Response, ResponseCompletedEvent, ResponseTextDeltaEvent

from telemetry.models import UsageRecord


def test_responses_create_non_streaming(sdk, proxy):
    response = sdk.responses.create(model="gpt-5.4", input="Say hello", stream=False)

    assert isinstance(response, Response)
    assert response.output_text == "Hello from the fake upstream."
    assert response.usage.input_tokens == 12 and response.usage.output_tokens == 5
    proxy.drain()
    assert UsageRecord.objects.get().message == "v1 responses completed"


def test_responses_create_streaming_events_parse_into_sdk_types(sdk, proxy):
    events = list(sdk.responses.create(model="gpt-5.4", input="Say hello", stream=True))

    assert all(type(event).__module__.startswith("openai.types.responses") for event in events)
    deltas = [event.delta for event in events if isinstance(event, ResponseTextDeltaEvent)]
    assert "".join(deltas) == "Hello from the fake upstream."
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert events[-1].response.usage.total_tokens == 17


def test_sdk_streams_over_http_while_the_upstream_speaks_websocket(sdk, proxy, upstream):
    events = list(sdk.responses.create(model="gpt-5.4", input="Say hello", stream=True))

    deltas = [event.delta for event in events if isinstance(event, ResponseTextDeltaEvent)]
    assert "".join(deltas) == "Hello from the fake upstream."
    [sent] = upstream.responses_requests()
    assert sent.method == "WS" and sent.extra["frame"]["type"] == "response.create"
    proxy.drain()
    assert UsageRecord.objects.get().transport == "websocket"


def test_sdk_sees_the_proxy_error_envelope(proxy, upstream, client_key):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk_not_a_key", max_retries=0)

    with pytest.raises(openai.AuthenticationError) as raised:
        client.responses.create(model="gpt-5.4", input="hi", stream=False)

    assert raised.value.status_code == 401
    assert raised.value.body == {
        "message": "Incorrect client API key provided: it is no key of this proxy",
        "type": "invalid_request_error",
        "code": "invalid_api_key",
    }


def test_sdk_gets_503_when_no_account_can_serve(proxy, upstream, client_key):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=client_key.key, max_retries=0)

    with pytest.raises(openai.InternalServerError) as raised:
        client.responses.create(model="gpt-5.4", input="hi", stream=False)

    assert raised.value.status_code == 503
    assert raised.value.body["code"] == "no_available_accounts"
