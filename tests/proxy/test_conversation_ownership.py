"""Conversations belong to the client key that started them (issue 34 item 1), through the
running proxy against the fake upstream, which records every upstream request.

The attack: key B learns key A's response id (or prompt_cache_key) and presents it. B must get
exactly what it gets for an id that never existed — the body byte for byte, the status, the
headers — while no upstream request carries A's id or A's text: not over HTTP JSON, SSE or the
client WebSocket, not when A's owner answers a history error (the replay path), not when B's
account group excludes A's account. The control in each test is B presenting an id nobody ever
produced (tried on one account untouched, spec §5.3; the upstream's refusal becomes OpenAI's
canonical 400, proxy/dispatch/unknown_previous.py).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import aiohttp
import pytest
import requests
from django.conf import settings
from django.utils import timezone

from proxy.models import Account, AccountUsage, RuntimeSettings
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set
from telemetry.models import UsageRecord
from tests.fakes.codex import Reply, previous_response_not_found
from tests.proxy.conftest import make_pool_account, post_responses, reset_rotation

SECRET = "the vault code is 7741-ALPHA"
# Headers every answer carries with its own value.
_PER_ANSWER_HEADERS = {"date", "x-request-id", "content-length"}


@pytest.fixture
def key_b(transactional_db):
    return client_api_key_create(name="key b", now=timezone.now())


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _unknown_id() -> str:
    """An id of the fake's shape that no account ever produced."""
    return f"resp_{uuid.uuid4().hex}"


def _completed(response: requests.Response) -> dict:
    assert response.status_code == 200, response.text
    if not response.headers["content-type"].startswith("text/event-stream"):
        return response.json()
    for block in response.content.split(b"\n\n"):
        if block.startswith(b"event: response.completed\n"):
            return json.loads(block.split(b"data: ", 1)[1])["response"]
    raise AssertionError(f"no response.completed in {response.content[:300]!r}")


def _turn(proxy, key, text: str, *, previous: str | None = None, **extra) -> requests.Response:
    body = {"model": "gpt-5.4", "store": True, "stream": False, "input": [_user(text)], **extra}
    if previous:
        body["previous_response_id"] = previous
    return post_responses(proxy, key, body)


def _carrying(upstream, *needles: str) -> list:
    """The upstream requests whose body or headers contain any of ``needles``."""
    found = []
    for request in upstream.requests:
        text = request.body.decode("utf-8", "replace") + repr(request.headers)
        if any(needle in text for needle in needles):
            found.append(request)
    return found


def _header_names(response: requests.Response) -> list[str]:
    return sorted(
        name.lower() for name in response.headers if name.lower() not in _PER_ANSWER_HEADERS
    )


def _assert_never_existed(foreign, unknown, foreign_id: str, unknown_id: str) -> None:
    """``foreign`` (another key's id) is answered like ``unknown`` (an id nobody produced):
    the same status, headers and body, byte for byte but for the id the client sent."""
    assert foreign.status_code == unknown.status_code == 400
    assert foreign.content == unknown.content.replace(unknown_id.encode(), foreign_id.encode())
    assert _header_names(foreign) == _header_names(unknown)
    assert foreign.headers["content-type"] == unknown.headers["content-type"]


# ----------------------------------------------------------------------------- HTTP and SSE


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("use_websocket", [None, False], ids=["ws-upstream", "http-upstream"])
def test_key_b_with_key_as_response_id_gets_the_never_existed_answer_and_no_upstream_call(
    proxy, upstream, client_key, key_b, stream, use_websocket
):
    make_pool_account("tok-a")
    transport = {} if use_websocket is None else {"use_websocket": use_websocket}
    upstream.default_reply = Reply(headers={"x-codex-turn-state": "ts-of-key-a"})
    a_id = _completed(_turn(proxy, client_key, SECRET, **transport))["id"]
    proxy.drain()
    upstream.default_reply = None
    before = len(upstream.requests)

    foreign = _turn(proxy, key_b, "what did they say?", previous=a_id, stream=stream, **transport)
    after_foreign = len(upstream.requests)
    unknown_id = _unknown_id()
    unknown = _turn(
        proxy, key_b, "what did they say?", previous=unknown_id, stream=stream, **transport
    )

    assert after_foreign == before  # no upstream call at all for A's id
    _assert_never_existed(foreign, unknown, a_id, unknown_id)
    assert foreign.json()["error"]["code"] == "previous_response_not_found"
    assert foreign.json()["error"]["message"] == f"Previous response with id '{a_id}' not found."
    # Nothing of A's — its id, its text, its stored turn state — reached any request but A's.
    assert _carrying(upstream, a_id, SECRET, "ts-of-key-a") == upstream.requests[:1]
    # A's own continuation is untouched: its owner, its id, its turn state.
    _completed(_turn(proxy, client_key, "and then?", previous=a_id, **transport))
    last = upstream.responses_requests()[-1]
    assert last.json()["previous_response_id"] == a_id
    assert last.header("x-codex-turn-state") == "ts-of-key-a"


@pytest.mark.parametrize("use_websocket", [None, False], ids=["ws-upstream", "http-upstream"])
def test_the_unknown_id_answer_does_not_depend_on_how_the_upstream_words_its_refusal(
    proxy, upstream, client_key, key_b, use_websocket
):
    """The control above is only a control if the upstream's own bytes cannot give the cases
    away: an upstream that words, orders and wraps its ``previous_response_not_found``
    differently (here: other key order, an extra field, its own message) still yields the
    canonical answer another key's id gets without an upstream call."""
    make_pool_account("tok-a")
    transport = {} if use_websocket is None else {"use_websocket": use_websocket}
    a_id = _completed(_turn(proxy, client_key, SECRET, **transport))["id"]
    proxy.drain()
    unknown_id = _unknown_id()
    upstream.program(
        "tok-a",
        Reply(
            kind="status",
            status=400,
            body={
                "error": {
                    "code": "previous_response_not_found",
                    "param": "previous_response_id",
                    "type": "invalid_request_error",
                    "message": f"No response found with id {unknown_id}",
                    "request_trace": "trace-77",
                }
            },
        ),
    )

    unknown = _turn(proxy, key_b, "hi", previous=unknown_id, **transport)
    foreign = _turn(proxy, key_b, "hi", previous=a_id, **transport)

    assert upstream.responses_requests()[-1].json()["previous_response_id"] == unknown_id
    _assert_never_existed(foreign, unknown, a_id, unknown_id)
    assert unknown.json() == {
        "error": {
            "message": f"Previous response with id '{unknown_id}' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }


# ----------------------------------------------------------------------------- groups, replay


def _groups(a_group: str, b_group: str, client_key, key_b) -> None:
    for key, group in ((client_key, a_group), (key_b, b_group)):
        key_policy_set(key=key, values=PolicyValues(account_group=group), now=timezone.now())


@pytest.mark.parametrize(
    "b_group",
    [
        # B may use A's account: A's owner answers a history error, so before issue 34 B's
        # request was retried there with A's whole history (the same-account replay).
        "all",
        # B's group excludes A's account: the owner is not B's to use, so before issue 34 A's
        # history went to B's account (the rotation with the replay).
        "only-b",
    ],
)
def test_no_replay_of_key_as_turns_reaches_key_b_whatever_its_group(
    proxy, upstream, client_key, key_b, b_group
):
    make_pool_account("tok-a", label="group:only-a group:all")
    make_pool_account("tok-b", label="group:only-b group:all")
    _groups("only-a", b_group, client_key, key_b)
    first = _completed(_turn(proxy, client_key, SECRET))
    second = _completed(_turn(proxy, client_key, "go on", previous=first["id"]))
    proxy.drain()
    assert upstream.tokens_called() == ["tok-a", "tok-a"]
    # The history error a replay would recover from, waiting on A's owner.
    upstream.program(
        "tok-a", Reply(kind="status", status=400, body=previous_response_not_found(second["id"]))
    )
    before = len(upstream.requests)

    foreign = _turn(proxy, key_b, "continue", previous=second["id"])
    after_foreign = len(upstream.requests)
    unknown_id = _unknown_id()
    if b_group == "all":
        # The unknown id must not meet A's programmed error: it is tok-b's to answer.
        Account.objects.filter(access_token="tok-a").update(status="disabled")
    unknown = _turn(proxy, key_b, "continue", previous=unknown_id)
    Account.objects.filter(access_token="tok-a").update(status="active")

    assert after_foreign == before
    _assert_never_existed(foreign, unknown, second["id"], unknown_id)
    assert upstream.tokens_called()[2:] == ["tok-b"]
    ids_and_text = (first["id"], second["id"], SECRET, "go on")
    assert all(request in upstream.requests[:2] for request in _carrying(upstream, *ids_and_text))
    # The programmed error was left for A: its next turn meets it and is replayed on its owner.
    _completed(_turn(proxy, client_key, "continue", previous=second["id"]))
    assert upstream.tokens_called()[3:] == ["tok-a", "tok-a"]
    replayed = upstream.responses_requests()[-1].json()
    assert "previous_response_id" not in replayed
    assert replayed["input"][0] == _user(SECRET)


# ----------------------------------------------------------------------------- prompt_cache_key


def test_key_b_with_key_as_prompt_cache_key_is_neither_steered_nor_given_its_socket(
    proxy, upstream, client_key, key_b, redis_client
):
    # quota_reset_priority without rotation: tok-b (earlier reset) ranks first for everyone,
    # so only a conversation's preference can send a request to tok-a.
    RuntimeSettings.objects.update(rotation_strategy="quota_reset_priority")
    reset_rotation()
    soon = timezone.now() + timedelta(hours=1)
    for token, reset_at, status in (
        ("tok-a", soon + timedelta(hours=1), "active"),
        ("tok-b", soon, "disabled"),
    ):
        AccountUsage.objects.create(
            account=make_pool_account(token, status=status), window_reset_at=reset_at
        )
    # B sends what A sent: the same prompt_cache_key and the same first message (so the same
    # variant: only the key tells the two conversations apart).
    shared = {"prompt_cache_key": "team-shared-cache-key", "instructions": "Be brief."}
    upstream.default_reply = Reply(headers={"x-codex-turn-state": "ts-of-key-a"})
    a_first = _completed(_turn(proxy, client_key, "hello", **shared))  # tok-b is away: tok-a
    proxy.drain()
    Account.objects.filter(access_token="tok-b").update(status="active")
    a_second = _completed(_turn(proxy, client_key, "hello", **shared))
    proxy.drain()
    upstream.default_reply = None

    b_first = _completed(_turn(proxy, key_b, "hello", **shared))
    proxy.drain()
    Account.objects.filter(access_token="tok-b").update(status="disabled")
    b_second = _completed(_turn(proxy, key_b, "hello", **shared))  # tok-a, the only one left
    proxy.drain()

    # A's preference beats the ranking (the control); B's conversation is its own.
    assert upstream.tokens_called() == ["tok-a", "tok-a", "tok-b", "tok-a"]
    connections = [request.extra["connection"] for request in upstream.websocket_requests()]
    assert connections[0] == connections[1]  # A's second turn reused A's socket
    assert connections[3] != connections[0]  # B on A's account: a socket of its own
    assert all(not request.header("x-codex-turn-state") for request in upstream.requests[2:])
    records = {
        answer["id"]: json.loads(
            redis_client.get(f"{settings.REDIS_KEY_PREFIX}affinity:v2:resp:{answer['id']}")
        )
        for answer in (a_first, a_second, b_first, b_second)
    }
    a_conversation = records[a_first["id"]]["conversationId"]
    b_conversation = records[b_first["id"]]["conversationId"]
    assert records[a_second["id"]]["conversationId"] == a_conversation != b_conversation
    assert records[b_second["id"]]["conversationId"] == b_conversation
    assert [records[answer["id"]]["clientKeyId"] for answer in (a_first, b_first)] == [
        client_key.id,
        key_b.id,
    ]


# ----------------------------------------------------------------------------- Redis forgot


def _record_key(response_id: str) -> str:
    return f"{settings.REDIS_KEY_PREFIX}affinity:v2:resp:{response_id}"


def _lose_the_record(redis_client, response_id: str, how: str) -> None:
    """What Redis may do to a record at any time (seed §2.9): let it lapse (its 4 h TTL, a
    FLUSHALL, an eviction: the same state) or hand back something unreadable (the lookup
    fails)."""
    if how == "lapsed":
        redis_client.delete(_record_key(response_id))
    else:
        redis_client.set(_record_key(response_id), b"\xff not a record", keepttl=True)


@pytest.mark.parametrize("how", ["lapsed", "unreadable"])
def test_key_b_with_key_as_id_after_redis_lost_its_record_still_gets_the_never_existed_answer(
    proxy, upstream, client_key, key_b, redis_client, how
):
    # Reported by the review of issue 34 (tests/proxy/test_review34_defects.py, commit
    # f130c8f): with the record gone the id was "unknown", sent untouched to one account — A's
    # own here, the only one — which continued A's conversation for B (200, A's secret).
    make_pool_account("tok-a")
    a_id = _completed(_turn(proxy, client_key, SECRET))["id"]
    proxy.drain()
    assert UsageRecord.objects.filter(response_id=a_id).count() == 1
    _lose_the_record(redis_client, a_id, how)
    before = len(upstream.requests)

    foreign = _turn(proxy, key_b, "what was the code?", previous=a_id)
    after_foreign = len(upstream.requests)
    unknown_id = _unknown_id()
    unknown = _turn(proxy, key_b, "what was the code?", previous=unknown_id)

    assert after_foreign == before  # A's id went nowhere
    _assert_never_existed(foreign, unknown, a_id, unknown_id)
    assert foreign.json()["error"]["code"] == "previous_response_not_found"
    assert _carrying(upstream, a_id, SECRET) == upstream.requests[:1]
    # The ledger's word holds on compact too.
    compact = requests.post(
        f"{proxy.url}/v1/responses/compact",
        json={"model": "gpt-5.4", "input": [_user("compact")], "previous_response_id": a_id},
        headers={"Authorization": f"Bearer {key_b.key}"},
        timeout=30,
    )
    assert compact.json() == previous_response_not_found(a_id)
    assert len(upstream.requests) == after_foreign + 1  # only the unknown id's one attempt


def test_a_keys_own_id_whose_record_lapsed_is_tried_on_the_account_that_made_it(
    proxy, upstream, client_key, redis_client
):
    # quota_reset_priority without rotation: tok-b (earlier reset) ranks first, so only the
    # ledger's account can send the continuation to tok-a.
    RuntimeSettings.objects.update(rotation_strategy="quota_reset_priority")
    reset_rotation()
    soon = timezone.now() + timedelta(hours=1)
    for token, reset_at, status in (
        ("tok-a", soon + timedelta(hours=1), "active"),
        ("tok-b", soon, "disabled"),
    ):
        AccountUsage.objects.create(
            account=make_pool_account(token, status=status), window_reset_at=reset_at
        )
    first = _completed(_turn(proxy, client_key, SECRET))  # tok-b is away: tok-a
    proxy.drain()
    Account.objects.filter(access_token="tok-b").update(status="active")
    redis_client.delete(_record_key(first["id"]))

    continued = _turn(proxy, client_key, "and then?", previous=first["id"])

    # Before: tok-b (first in rank) got the id and answered previous_response_not_found.
    assert upstream.tokens_called() == ["tok-a", "tok-a"]
    assert continued.status_code == 200, continued.text
    assert upstream.responses_requests()[-1].json()["previous_response_id"] == first["id"]
    # The control: an id the ledger does not have is the one attempt of whichever ranks first.
    unknown_id = _unknown_id()
    _turn(proxy, client_key, "and then?", previous=unknown_id)
    assert upstream.tokens_called()[2:] == ["tok-b"]


def test_a_lapsed_id_whose_ledger_row_names_no_key_is_nobodys(
    proxy, upstream, client_key, key_b, redis_client
):
    # A row without a key (one imported from the original's ledger, say) proves nobody's
    # ownership: like a record without clientKeyId, its id is answered as never existing.
    make_pool_account("tok-a")
    a_id = _completed(_turn(proxy, client_key, SECRET))["id"]
    proxy.drain()
    UsageRecord.objects.filter(response_id=a_id).update(client_api_key_id=None)
    redis_client.delete(_record_key(a_id))
    before = len(upstream.requests)

    answers = [_turn(proxy, key, "again", previous=a_id) for key in (key_b, client_key)]
    after = len(upstream.requests)
    unknown_id = _unknown_id()
    unknown = _turn(proxy, key_b, "again", previous=unknown_id)

    assert after == before
    for answer in answers:
        _assert_never_existed(answer, unknown, a_id, unknown_id)


def test_key_b_before_the_ledger_row_of_key_as_answer_is_written_meets_its_record(
    proxy, upstream, client_key, key_b, settings
):
    """The ledger writes its rows in batches after the answer; the Redis record, written at
    once, covers the gap: B presenting A's id the moment A has it gets the never-existed
    answer while no usage row of A's response exists yet."""
    settings.LEDGER_FLUSH_INTERVAL_MS = 60_000  # the batch holds A's row for the whole test
    make_pool_account("tok-a")
    a_id = _completed(_turn(proxy, client_key, SECRET))["id"]
    before = len(upstream.requests)

    foreign = _turn(proxy, key_b, "what was the code?", previous=a_id)
    rows_then = UsageRecord.objects.filter(response_id=a_id).count()
    unknown_id = _unknown_id()
    unknown = _turn(proxy, key_b, "what was the code?", previous=unknown_id)

    assert rows_then == 0
    assert len(upstream.requests) == before + 1  # only the unknown id's attempt
    _assert_never_existed(foreign, unknown, a_id, unknown_id)
    proxy.drain()
    assert UsageRecord.objects.filter(response_id=a_id).count() == 1


# ----------------------------------------------------------------------------- compact, legacy


def test_compact_with_key_as_previous_id_is_answered_as_never_existed(
    proxy, upstream, client_key, key_b
):
    make_pool_account("tok-a")
    a_id = _completed(_turn(proxy, client_key, SECRET))["id"]
    proxy.drain()
    before = len(upstream.requests)

    def compact(previous: str) -> requests.Response:
        return requests.post(
            f"{proxy.url}/v1/responses/compact",
            json={
                "model": "gpt-5.4",
                "input": [_user("compact")],
                "previous_response_id": previous,
            },
            headers={"Authorization": f"Bearer {key_b.key}"},
            timeout=30,
        )

    foreign = compact(a_id)
    after_foreign = len(upstream.requests)
    unknown_id = _unknown_id()
    unknown = compact(unknown_id)

    assert after_foreign == before
    _assert_never_existed(foreign, unknown, a_id, unknown_id)
    assert foreign.json() == previous_response_not_found(a_id)
    assert _carrying(upstream, a_id, SECRET) == upstream.requests[:1]


def test_a_record_written_before_records_named_their_key_is_nobodys(
    proxy, upstream, client_key, key_b, redis_client
):
    make_pool_account("tok-a")
    a_id = _completed(_turn(proxy, client_key, SECRET))["id"]
    proxy.drain()
    # The record as it was written before issue 34: no clientKeyId, in the record or its node.
    record_key = f"{settings.REDIS_KEY_PREFIX}affinity:v2:resp:{a_id}"
    record = json.loads(redis_client.get(record_key))
    del record["clientKeyId"], record["replay"]["clientKeyId"]
    redis_client.set(record_key, json.dumps(record), keepttl=True)
    before = len(upstream.requests)

    answers = [_turn(proxy, key, "again", previous=a_id) for key in (key_b, client_key)]
    after = len(upstream.requests)
    unknown_id = _unknown_id()
    unknown = _turn(proxy, key_b, "again", previous=unknown_id)

    assert after == before  # honoured for nobody: not routed, not replayed, not sent
    for answer in answers:
        _assert_never_existed(answer, unknown, a_id, unknown_id)


# ----------------------------------------------------------------------------- client WebSocket


def _ws_url(proxy) -> str:
    return proxy.url.replace("http://", "ws://") + "/v1/responses"


async def _one_answer(socket) -> list[dict]:
    events = []
    async for message in socket:
        event = json.loads(message.data)
        events.append(event)
        if event["type"] in ("response.completed", "response.failed", "error"):
            break
    return events


def _create(**fields) -> str:
    return json.dumps({"type": "response.create", "model": "gpt-5.4", "stream": True, **fields})


@pytest.mark.parametrize("store", [True, False])
def test_key_b_on_the_client_websocket_gets_the_never_existed_frame(
    proxy, upstream, client_key, key_b, store
):
    """On the client WebSocket (``GET /v1/responses``): A's response made on A's socket (with
    ``store:false`` a connection-local one, which only A's pooled upstream socket knows)."""
    make_pool_account("tok-a")

    async def scenario() -> tuple[str, list[dict], int, int, list[dict]]:
        async with aiohttp.ClientSession() as session:
            a_socket = await session.ws_connect(
                _ws_url(proxy), headers={"Authorization": f"Bearer {client_key.key}"}
            )
            await a_socket.send_str(_create(store=store, input=[_user(SECRET)]))
            a_events = await _one_answer(a_socket)
            a_id = a_events[-1]["response"]["id"]
            await asyncio.to_thread(proxy.drain)
            async with session.ws_connect(
                _ws_url(proxy), headers={"Authorization": f"Bearer {key_b.key}"}
            ) as b_socket:
                before = len(upstream.requests)
                await b_socket.send_str(
                    _create(store=store, previous_response_id=a_id, input=[_user("more")])
                )
                foreign = await _one_answer(b_socket)
                after = len(upstream.requests)
                unknown_id = _unknown_id()
                await b_socket.send_str(
                    _create(store=store, previous_response_id=unknown_id, input=[_user("more")])
                )
                unknown = await _one_answer(b_socket)
            # A's own continuation on A's socket still works (the control).
            await a_socket.send_str(
                _create(store=store, previous_response_id=a_id, input=[_user("more")])
            )
            continued = await _one_answer(a_socket)
            await a_socket.close()
            frames = json.loads(json.dumps(unknown).replace(unknown_id, a_id))
            return a_id, foreign, before, after, [frames, continued]

    a_id, foreign, before, after, (expected, continued) = asyncio.run(scenario())

    assert after == before
    assert foreign == expected and len(foreign) == 1
    [frame] = foreign
    assert (frame["type"], frame["status"]) == ("error", 400)
    code = "previous_response_not_found" if store else "previous_response_unavailable"
    assert frame["error"]["code"] == code
    assert continued[-1]["type"] == "response.completed", continued
    sent = upstream.websocket_requests()
    assert sent[-1].json()["previous_response_id"] == a_id
    assert sent[-1].header("authorization") == "Bearer tok-a"
    # Upstream: A's turn, B's unknown id (store:false: refused by the pool, never sent), A's.
    assert len(sent) == (3 if store else 2)
    assert _carrying(upstream, a_id, SECRET) == [sent[0], sent[-1]]
