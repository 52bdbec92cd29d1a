"""Every unexpected exception on ``/v1`` (HTTP and the client WebSocket) leaves an
``ops_error_logs`` row — the route, the request id and the exception's kind, never its text —
besides the 500 envelope (or error frame) the client gets.

Nothing a client can send raises one any more, so the test makes the JSON library itself fail
(orjson, outside the project's code) with an error the request path does not expect."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import orjson
import pytest
import requests

from telemetry.models import OpsErrorLog
from tests.proxy.conftest import make_pool_account

SECRET_TEXT = "the exception's own text, which may quote the request"


def _exploding_loads(data):
    raise RuntimeError(SECRET_TEXT)


@pytest.fixture
def failing_json_library(monkeypatch):
    monkeypatch.setattr(orjson, "loads", _exploding_loads)


def test_an_unexpected_failure_of_a_v1_request_is_a_500_with_its_ops_error_logs_row(
    proxy, upstream, client_key, failing_json_library
):
    make_pool_account("tok-a")

    response = requests.post(
        f"{proxy.url}/v1/responses",
        data=json.dumps({"model": "gpt-5.4", "input": "hello"}),
        headers={"Authorization": f"Bearer {client_key.key}", "x-request-id": "req-unexpected"},
        timeout=30,
    )
    proxy.drain()

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    [row] = OpsErrorLog.objects.all()
    assert (row.request_id, row.route, row.status_code, row.client_status_code) == (
        "req-unexpected",
        "/v1/responses",
        500,
        500,
    )
    assert row.message == "v1 request failed unexpectedly"
    assert row.metadata_json["exceptionType"] == "RuntimeError"
    assert SECRET_TEXT not in json.dumps(row.metadata_json) + row.message
    assert upstream.responses_requests() == []


def test_an_unexpected_failure_on_the_client_websocket_leaves_its_row_too(
    proxy, upstream, client_key, failing_json_library
):
    make_pool_account("tok-a")
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"

    async def scenario() -> dict:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, headers={"Authorization": f"Bearer {client_key.key}"}) as ws,
        ):
            await ws.send_str(json.dumps({"type": "response.create", "model": "gpt-5.4"}))
            return json.loads((await ws.receive(timeout=30)).data)

    frame = asyncio.run(scenario())
    proxy.drain()

    assert (frame["type"], frame["status"], frame["error"]["code"]) == (
        "error",
        500,
        "internal_error",
    )
    [row] = OpsErrorLog.objects.all()
    assert (row.route, row.message, row.metadata_json["exceptionType"]) == (
        "/v1/responses",
        "v1 request failed unexpectedly",
        "RuntimeError",
    )
    assert SECRET_TEXT not in json.dumps(row.metadata_json)
