"""The client-facing WebSocket at ``/v1/responses``: key check at the upgrade (401 before
accepting), ``response.create`` frames in, one JSON frame per event out, several requests on one
socket, connection-local continuation, errors as error frames, the client leaving."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time

import aiohttp
import pytest
import redis as redis_library
from django.conf import settings

from telemetry.models import UsageRecord
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account


def _url(proxy) -> str:
    return proxy.url.replace("http://", "ws://") + "/v1/responses"


async def _events_of_one_response(socket) -> list[dict]:
    events = []
    async for message in socket:
        assert message.type is aiohttp.WSMsgType.TEXT
        event = json.loads(message.data)
        events.append(event)
        if event["type"] in ("response.completed", "response.failed", "error"):
            return events
    return events


def _create(**fields) -> str:
    return json.dumps(
        {"type": "response.create", "model": "gpt-5.4", "input": [], "stream": True, **fields}
    )


def _session_run(scenario):
    async def run():
        async with aiohttp.ClientSession() as session:
            return await scenario(session)

    return asyncio.run(run())


def test_an_unknown_key_is_refused_with_401_before_the_upgrade(proxy, upstream):
    async def scenario(session):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(_url(proxy), headers={"Authorization": "Bearer sk_nope"})
        return refused.value.status

    assert _session_run(scenario) == 401
    assert upstream.responses_requests() == []


def test_several_requests_on_one_socket_each_event_one_frame(proxy, upstream, client_key):
    make_pool_account("tok-a")
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        answers = []
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            for turn in range(2):
                await socket.send_str(_create(prompt_cache_key="conv-ws", input=[f"turn {turn}"]))
                answers.append(await _events_of_one_response(socket))
        return answers

    answers = _session_run(scenario)

    for events in answers:
        assert events[0]["type"] == "response.created", events
        assert events[-1]["type"] == "response.completed"
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == "Hello from the fake upstream."
        assert not any(e["type"] in ("response.metadata", "codex.rate_limits") for e in events)
    assert upstream.ws_connections["tok-a"] == 1
    proxy.drain()
    records = UsageRecord.objects.order_by("created_at")
    assert [(r.route, r.transport, r.client_api_key_id) for r in records] == [
        ("/v1/responses", "websocket", client_key.id)
    ] * 2


def test_store_false_continuation_on_the_socket_reaches_the_same_upstream_socket(
    proxy, upstream, client_key
):
    make_pool_account("tok-a")
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            await socket.send_str(_create(store=False, input=[{"role": "user", "content": "a"}]))
            first = await _events_of_one_response(socket)
            latest = first[-1]["response"]["id"]
            await socket.send_str(
                _create(
                    store=False,
                    previous_response_id=latest,
                    input=[{"role": "user", "content": "b"}],
                )
            )
            return latest, await _events_of_one_response(socket)

    latest, second = _session_run(scenario)

    assert second[-1]["type"] == "response.completed", second
    first_sent, second_sent = upstream.websocket_requests()
    assert second_sent.json()["previous_response_id"] == latest
    assert first_sent.extra["connection"] == second_sent.extra["connection"]


def test_errors_come_back_as_error_frames_and_the_socket_stays_open(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program(
        "tok-a",
        Reply(kind="status", status=400, body={"error": {"message": "bad", "code": "nope"}}),
    )
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        frames = []
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            for text in (
                "not json",
                json.dumps({"type": "response.create", "model": "no-such-model"}),
                _create(),  # the programmed upstream 400
                _create(),
            ):
                await socket.send_str(text)
                frames.append(await _events_of_one_response(socket))
        return frames

    not_json, unknown_model, upstream_error, served = _session_run(scenario)

    assert not_json == [
        {
            "type": "error",
            "status": 400,
            "error": {
                "message": "Invalid responses request",
                "type": "invalid_request_error",
                "code": "invalid_request",
            },
        }
    ]
    assert unknown_model[0]["status"] == 404
    assert unknown_model[0]["error"]["code"] == "model_not_found"
    assert upstream_error == [
        {"type": "error", "status": 400, "error": {"message": "bad", "code": "nope"}, "headers": {}}
    ]
    assert served[-1]["type"] == "response.completed"


def test_a_frame_over_16_mib_is_refused(proxy, upstream, client_key):
    make_pool_account("tok-a")
    auth = {"Authorization": f"Bearer {client_key.key}"}
    big = _create(input=["x" * (settings.V1_MAX_BODY_BYTES + 1)])

    async def scenario(session):
        async with session.ws_connect(_url(proxy), headers=auth, max_msg_size=0) as socket:
            try:
                await socket.send_str(big)
                message = await socket.receive()
            except (aiohttp.ClientError, ConnectionError):
                return aiohttp.WSMsgType.CLOSED, None
            return message.type, message.data

    kind, data = _session_run(scenario)

    # Refused by the server's frame limit (close 1009) or by the consumer's (an error frame).
    if kind is aiohttp.WSMsgType.TEXT:
        assert json.loads(data)["status"] == 413
    else:
        assert kind in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert upstream.responses_requests() == []


def test_the_client_leaving_mid_stream_frees_the_slot(proxy, upstream, client_key):
    account = make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=100, delta_delay=0.1))
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            await socket.send_str(_create())
            async for message in socket:
                if json.loads(message.data)["type"] == "response.output_text.delta":
                    break

    _session_run(scenario)

    client = redis_library.Redis.from_url(settings.REDIS_URL)
    slots = f"{settings.REDIS_KEY_PREFIX}scheduler:slots:{account.id}"
    deadline = time.monotonic() + 5
    while (client.zcard(slots) or "tok-a" not in upstream.disconnects) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert client.zcard(slots) == 0
    assert "tok-a" in upstream.disconnects  # the upstream read was cancelled
    client.close()


def test_a_host_not_allowed_is_refused_with_400_before_the_upgrade(proxy, upstream, client_key):
    make_pool_account("tok-a")
    headers = {"Authorization": f"Bearer {client_key.key}", "Host": "evil.example"}

    async def scenario(session):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(_url(proxy), headers=headers)
        return refused.value.status

    assert _session_run(scenario) == 400
    assert upstream.responses_requests() == []


def test_the_ledger_has_the_client_behind_a_trusted_proxy_and_only_then(
    proxy, upstream, client_key, settings
):
    make_pool_account("tok-a")
    forwarded = {
        "Authorization": f"Bearer {client_key.key}",
        "X-Forwarded-For": "203.0.113.7",
    }

    async def one_request(session):
        async with session.ws_connect(_url(proxy), headers=forwarded) as socket:
            await socket.send_str(_create(input=["hi"]))
            return await _events_of_one_response(socket)

    settings.TRUSTED_PROXIES = []
    assert _session_run(one_request)[-1]["type"] == "response.completed"
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("127.0.0.1/32")]
    assert _session_run(one_request)[-1]["type"] == "response.completed"
    proxy.drain()

    records = UsageRecord.objects.order_by("created_at")
    client_ips = [record.metadata_json["clientIp"] for record in records]
    assert client_ips == ["127.0.0.1", "203.0.113.7"]


def test_the_keys_policy_applies_on_the_client_websocket_too(proxy, upstream, client_key):
    # Issue 25's per-key policy is checked on every response.create, as on HTTP: a model the
    # key may not use is refused, and the requests-per-minute limit counts socket requests.
    from django.utils import timezone

    from proxy.services.key_policies import PolicyValues, key_policy_set

    make_pool_account("tok-a")
    key_policy_set(
        key=client_key,
        values=PolicyValues(requests_per_minute=1, allowed_models=["gpt-5.4"]),
        now=timezone.now(),
    )
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        frames = []
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            for fields in ({"model": "gpt-5.4-mini"}, {}, {}):
                await socket.send_str(_create(**fields))
                frames.append(await _events_of_one_response(socket))
        return frames

    other_model, served, over_limit = _session_run(scenario)

    assert other_model == [
        {
            "type": "error",
            "status": 403,
            "error": {
                "message": "This API key is not allowed to use this model",
                "type": "invalid_request_error",
                "code": "model_not_allowed",
            },
        }
    ]
    assert served[-1]["type"] == "response.completed"
    assert over_limit[0]["status"] == 429
    assert over_limit[0]["error"]["code"] == "key_rate_limited"
    assert len(upstream.websocket_requests()) == 1


async def _next_event(socket) -> dict:
    message = await socket.receive(timeout=30)
    assert message.type is aiohttp.WSMsgType.TEXT, message
    return json.loads(message.data)


async def _until(socket, event_type: str, seen: list[dict]) -> None:
    """Read events into ``seen`` up to and including the next one of ``event_type``."""
    while True:
        event = await _next_event(socket)
        seen.append(event)
        if event["type"] == event_type:
            return


def test_one_frame_waits_behind_the_running_one_and_any_further_is_refused(
    proxy, upstream, client_key
):
    """Issue 35 item 3: a socket holds at most the request being answered and one waiting
    behind it; a third frame meanwhile is refused at once (and dropped: it is never sent
    upstream), the waiting one is answered after the first."""
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=20, delta_delay=0.1), Reply())
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        seen: list[dict] = []
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            await socket.send_str(_create(input=["first"]))
            await _until(socket, "response.created", seen)
            await socket.send_str(_create(input=["second"]))
            await socket.send_str(_create(input=["third"]))
            await _until(socket, "response.completed", seen)
            await _until(socket, "response.completed", seen)
        return seen

    seen = _session_run(scenario)

    kinds = [event["type"] for event in seen]
    assert kinds.count("error") == 1
    # Refused while the first was still streaming, not after it.
    assert kinds.index("error") < kinds.index("response.completed")
    assert seen[kinds.index("error")] == {
        "type": "error",
        "status": 429,
        "error": {
            "message": "A request is already waiting on this socket behind the one in progress; "
            "send the next one when an answer ends",
            "type": "rate_limit_error",
            "code": "request_already_waiting",
        },
    }
    # The waiting one was answered after the first, in full.
    after_first = kinds[kinds.index("response.completed") + 1 :]
    assert after_first[0] == "response.created" and after_first[-1] == "response.completed"
    assert [request.json()["input"] for request in upstream.websocket_requests()] == [
        ["first"],
        ["second"],
    ]


@pytest.mark.slow
def test_a_waiting_frame_meets_the_keys_policy_when_it_arrives(proxy, upstream, client_key):
    """Issue 35 item 3: the frame that will wait is checked against its key's policy on
    arrival — a model the key may not use, and a requests window the running request filled —
    and answered at once, while the running one still streams. The concurrency check leaves
    the socket's own running request out (the waiting frame runs only after it), so with a
    limit of one the waiting frame is served."""
    from django.utils import timezone

    from proxy.services.key_policies import PolicyValues, key_policy_set

    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=20, delta_delay=0.1), Reply(deltas=20, delta_delay=0.1))
    key_policy_set(
        key=client_key,
        values=PolicyValues(
            allowed_models=["gpt-5.4"], requests_per_minute=2, max_concurrent_requests=1
        ),
        now=timezone.now(),
    )
    auth = {"Authorization": f"Bearer {client_key.key}"}

    async def scenario(session):
        first: list[dict] = []
        second: list[dict] = []
        async with session.ws_connect(_url(proxy), headers=auth) as socket:
            await socket.send_str(_create(input=["one"]))
            await _until(socket, "response.created", first)
            await socket.send_str(_create(model="gpt-5.4-mini", input=["not allowed"]))
            await _until(socket, "error", first)
            await socket.send_str(_create(input=["two"]))  # waits (concurrency: own not counted)
            await _until(socket, "response.completed", first)
            await _until(socket, "response.created", second)
            await socket.send_str(_create(input=["three"]))  # the window holds one and two
            await _until(socket, "error", second)
            await _until(socket, "response.completed", second)
        return first, second

    first, second = _session_run(scenario)

    [not_allowed] = [event for event in first if event["type"] == "error"]
    assert not_allowed["status"] == 403
    assert not_allowed["error"]["code"] == "model_not_allowed"
    assert first[-1]["type"] == "response.completed"  # it kept streaming past the refusal
    [over_window] = [event for event in second if event["type"] == "error"]
    assert over_window["status"] == 429
    assert over_window["error"]["code"] == "key_rate_limited"
    assert second[-1]["type"] == "response.completed"
    assert [request.json()["input"] for request in upstream.websocket_requests()] == [
        ["one"],
        ["two"],
    ]
