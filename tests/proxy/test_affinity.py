"""Conversations stay on their account (issue 16, spec §5, seed 004 §4B.3), through the running
proxy against the fake upstream (which, like the real backend, knows only the response ids
each account produced), with the records read back from the real Redis."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

import pytest
import requests
from django.conf import settings

from proxy.models import Account, RuntimeSettings
from proxy.services.accounts import account_delete
from telemetry.models import UsageRecord
from tests.conftest import flush_this_runs_keys
from tests.fakes.codex import Reply, previous_response_not_found
from tests.proxy.conftest import make_pool_account, post_responses, reset_rotation

FOUR_HOURS = 4 * 3600
UNAVAILABLE_MESSAGE = (
    "Previous response context is unavailable. Start a new conversation or resend the "
    "complete input without previous_response_id."
)


@pytest.fixture
def pool(proxy, upstream):
    """Three accounts under round robin: without affinity, turns would spread over them."""
    RuntimeSettings.objects.update(rotation_strategy="round_robin")
    reset_rotation()
    return {token: make_pool_account(token) for token in ("tok-a", "tok-b", "tok-c")}


def _key(kind: str, name: str) -> str:
    return f"{settings.REDIS_KEY_PREFIX}affinity:v2:{kind}:{name}"


def _record(redis_client, response_id: str) -> dict | None:
    raw = redis_client.get(_key("resp", response_id))
    return None if raw is None else json.loads(raw)


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _completed(response: requests.Response) -> dict:
    """The response object of a non-stream answer or of a stream's response.completed."""
    assert response.status_code == 200, response.text
    if not response.headers["content-type"].startswith("text/event-stream"):
        return response.json()
    for block in response.content.split(b"\n\n"):
        if block.startswith(b"event: response.completed\n"):
            return json.loads(block.split(b"data: ", 1)[1])["response"]
    raise AssertionError(f"no response.completed in {response.content[:300]!r}")


def _turn(proxy, key, text, *, previous=None, stream=False, **extra) -> requests.Response:
    body = {"model": "gpt-5.4", "store": True, "stream": stream, "input": [_user(text)], **extra}
    if previous:
        body["previous_response_id"] = previous
    return post_responses(proxy, key, body)


def _chain(proxy, key, turns: int, *, first_previous=None) -> list[dict]:
    """``turns`` turns, each continuing the previous one (streams and non-streams by turn)."""
    responses, previous = [], first_previous
    for index in range(turns):
        answer = _completed(
            _turn(proxy, key, f"turn {index}", previous=previous, stream=index % 2 == 1)
        )
        responses.append(answer)
        previous = answer["id"]
    return responses


def _without_ids(items: list) -> list:
    return [{key: value for key, value in item.items() if key != "id"} for item in items]


# ----------------------------------------------------------------------------- staying put


def test_a_ten_turn_previous_response_id_chain_stays_on_one_account(
    pool, proxy, upstream, client_key
):
    responses = _chain(proxy, client_key, 10)

    called = upstream.tokens_called()
    assert len(called) == 10 and len(set(called)) == 1
    proxy.drain()
    rows = UsageRecord.objects.filter(request_id__isnull=False)
    assert rows.count() == 10
    assert set(rows.values_list("account_id", flat=True)) == {pool[called[0]].pk}
    assert [
        request.json().get("previous_response_id") for request in upstream.responses_requests()
    ] == [
        None,
        *(answer["id"] for answer in responses[:-1]),
    ]


def test_turns_with_one_prompt_cache_key_stay_on_one_account(pool, proxy, upstream, client_key):
    history = []
    for index in range(6):
        # Without a previous id the client sends the whole conversation every turn.
        history.append(_user(f"turn {index}"))
        body = {"model": "gpt-5.4", "stream": index % 2 == 1, "input": history}
        answer = _completed(post_responses(proxy, client_key, {**body, "prompt_cache_key": "c1"}))
        history += _without_ids(answer["output"])
        proxy.drain()  # the preference reads what the previous turn recorded

    assert len(set(upstream.tokens_called())) == 1


def test_without_affinity_round_robin_would_have_spread_the_turns(
    pool, proxy, upstream, client_key
):
    """The control of the test above: different conversations do rotate."""
    for index in range(3):
        _completed(_turn(proxy, client_key, "hello", prompt_cache_key=f"conversation-{index}"))
        proxy.drain()

    assert len(set(upstream.tokens_called())) == 3


# ----------------------------------------------------------------------------- recovery


def test_an_ineligible_owner_sends_the_next_turn_in_full_to_another_account(
    pool, proxy, upstream, client_key
):
    responses = _chain(proxy, client_key, 3)
    owner = upstream.tokens_called()[0]
    Account.objects.filter(pk=pool[owner].pk).update(status="disabled")

    fourth = _completed(_turn(proxy, client_key, "turn 3", previous=responses[-1]["id"]))

    replayed = upstream.responses_requests()[-1]
    assert upstream.tokens_called()[-1] != owner
    body = replayed.json()
    assert "previous_response_id" not in body
    expected = []
    for index, answer in enumerate(responses):
        expected += [_user(f"turn {index}"), *_without_ids(answer["output"])]
    assert body["input"] == [*expected, _user("turn 3")]
    # The chain goes on from the new owner, which knows the replayed response.
    new_owner = upstream.tokens_called()[-1]
    _completed(_turn(proxy, client_key, "turn 4", previous=fourth["id"]))
    assert upstream.tokens_called()[-1] == new_owner
    assert upstream.responses_requests()[-1].json()["previous_response_id"] == fourth["id"]


def test_a_history_error_on_the_owner_is_retried_once_there_with_the_full_replay(
    pool, proxy, upstream, client_key
):
    [first] = _chain(proxy, client_key, 1)
    owner = upstream.tokens_called()[0]
    upstream.program(
        owner, Reply(kind="status", status=400, body=previous_response_not_found(first["id"]))
    )

    _completed(_turn(proxy, client_key, "again", previous=first["id"]))

    assert upstream.tokens_called() == [owner, owner, owner]
    retry = upstream.responses_requests()[-1].json()
    assert "previous_response_id" not in retry
    assert retry["input"] == [_user("turn 0"), *_without_ids(first["output"]), _user("again")]


def test_a_history_failure_inside_the_held_stream_is_recovered_invisibly(
    pool, proxy, upstream, client_key
):
    [first] = _chain(proxy, client_key, 1)
    owner = upstream.tokens_called()[0]
    upstream.program(owner, Reply(kind="failed", code="previous_response_not_found"))

    response = _turn(proxy, client_key, "again", previous=first["id"], stream=True)

    _completed(response)
    assert b"response.failed" not in response.content
    assert upstream.tokens_called() == [owner, owner, owner]
    assert "previous_response_id" not in upstream.responses_requests()[-1].json()


def test_a_chain_whose_replay_is_missing_answers_previous_response_unavailable(
    pool, proxy, upstream, client_key, redis_client
):
    responses = _chain(proxy, client_key, 2)
    proxy.drain()
    owner = upstream.tokens_called()[0]
    redis_client.delete(_key("resp", responses[0]["id"]))  # the chain's first node is gone
    Account.objects.filter(pk=pool[owner].pk).update(status="disabled")

    response = _turn(proxy, client_key, "turn 2", previous=responses[-1]["id"])

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": UNAVAILABLE_MESSAGE,
            "type": "invalid_request_error",
            "code": "previous_response_unavailable",
        }
    }
    assert len(upstream.tokens_called()) == 2  # nothing sent to another account


def test_a_history_error_on_the_owner_without_a_replay_is_previous_response_unavailable(
    pool, proxy, upstream, client_key, redis_client
):
    [first] = _chain(proxy, client_key, 1)
    proxy.drain()
    record = _record(redis_client, first["id"])
    record["replay"] = None
    redis_client.set(_key("resp", first["id"]), json.dumps(record), keepttl=True)
    owner = upstream.tokens_called()[0]
    upstream.program(
        owner, Reply(kind="status", status=400, body=previous_response_not_found(first["id"]))
    )

    response = _turn(proxy, client_key, "again", previous=first["id"])

    assert (response.status_code, response.json()["error"]["code"]) == (
        400,
        "previous_response_unavailable",
    )
    assert upstream.tokens_called() == [owner, owner]


def test_an_unknown_previous_id_is_tried_on_exactly_one_account_and_its_answer_passed_through(
    pool, proxy, upstream, client_key
):
    response = _turn(proxy, client_key, "hello", previous="resp_from_somewhere_else")

    assert len(upstream.tokens_called()) == 1
    assert response.status_code == 400
    # The upstream's refusal (here its WebSocket error frame) becomes OpenAI's canonical
    # answer, the one another key's id gets without an upstream call (issue 34).
    assert response.json() == {
        "error": {
            "message": "Previous response with id 'resp_from_somewhere_else' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }
    assert upstream.responses_requests()[0].json()["previous_response_id"] == (
        "resp_from_somewhere_else"
    )


# ----------------------------------------------------------------------------- the records


def test_the_records_keys_values_and_ttls_after_real_requests(
    pool, proxy, upstream, client_key, redis_client
):
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    first = _completed(
        _turn(
            proxy,
            client_key,
            "hello",
            instructions="Be brief.",
            tools=tools,
            prompt_cache_key="conversation-keys",
        )
    )
    second = _completed(
        _turn(
            proxy,
            client_key,
            "more",
            previous=first["id"],
            instructions="Be brief.",
            tools=tools,
            prompt_cache_key="conversation-keys",
            stream=True,
        )
    )
    proxy.drain()
    account_id = pool[upstream.tokens_called()[0]].pk

    one, two = _record(redis_client, first["id"]), _record(redis_client, second["id"])
    assert set(one) == {
        "accountId",
        "clientKeyId",  # our extension (issue 34): whose the conversation is
        "conversationId",
        "turnState",
        "instructionsHash",
        "inputTokens",
        "functionCallIds",
        "variantHash",
        "continuationScope",
        "replay",
        "createdAt",
    }
    assert one["accountId"] == two["accountId"] == account_id
    assert one["clientKeyId"] == two["clientKeyId"] == client_key.id
    assert one["conversationId"].startswith("lc_")
    assert two["conversationId"] == one["conversationId"]
    assert one["instructionsHash"] == hashlib.sha256(b"Be brief.").hexdigest()
    assert one["inputTokens"] == first["usage"]["input_tokens"]
    assert one["functionCallIds"] == []
    # 12 hex of SHA-256 over instructions, tools and the stable key (a prompt_cache_key was
    # sent); the continuation's first user text differs, so does its variant.
    assert all(len(record["variantHash"]) == 12 for record in (one, two))
    assert int(one["variantHash"], 16) >= 0 and one["variantHash"] != two["variantHash"]
    assert one["continuationScope"] == "persisted"
    assert one["replay"] == {
        "parentResponseId": None,
        "clientKeyId": client_key.id,
        "turnInput": [_user("hello")],
        "turnOutput": _without_ids(first["output"]),
        "depth": 1,
        "totalBytes": one["replay"]["totalBytes"],
    }
    assert two["replay"]["parentResponseId"] == first["id"]
    assert two["replay"]["depth"] == 2
    assert two["replay"]["totalBytes"] > one["replay"]["totalBytes"]

    for response_id, record in ((first["id"], one), (second["id"], two)):
        created = datetime.fromisoformat(record["createdAt"])
        assert redis_client.expiretime(_key("resp", response_id)) == (
            int(created.timestamp()) + FOUR_HOURS
        )
        score = int(created.timestamp() * 1000)
        for index in (_key("conv", one["conversationId"]), _key("account", account_id)):
            assert redis_client.zscore(index, response_id) == score
            assert FOUR_HOURS - 60 < redis_client.ttl(index) <= FOUR_HOURS


def test_replay_nodes_drop_ids_and_encrypted_content_but_keep_call_ids(
    pool, proxy, upstream, client_key, redis_client
):
    turn_input = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-secret"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "f",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "x", "encrypted_content": "nested"}],
        },
    ]
    response = post_responses(
        proxy, client_key, {"model": "gpt-5.4", "stream": False, "input": turn_input}
    )
    answer = _completed(response)
    proxy.drain()

    assert _record(redis_client, answer["id"])["replay"]["turnInput"] == [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]},
    ]


def test_a_turn_over_the_node_cap_gets_no_replay_and_its_chain_cannot_move(
    pool, proxy, upstream, client_key, redis_client
):
    big = _completed(_turn(proxy, client_key, "x" * (2 * 1024 * 1024 + 1)))
    proxy.drain()
    assert _record(redis_client, big["id"])["replay"] is None  # the response itself succeeded
    owner = upstream.tokens_called()[0]
    Account.objects.filter(pk=pool[owner].pk).update(status="disabled")

    response = _turn(proxy, client_key, "next", previous=big["id"])

    assert response.json()["error"]["code"] == "previous_response_unavailable"


def test_an_unknown_previous_id_leaves_a_record_without_a_replay_node(
    pool, proxy, upstream, client_key, redis_client
):
    upstream.known_response_ids["tok-a"].add("resp_external")
    upstream.known_response_ids["tok-b"].add("resp_external")
    upstream.known_response_ids["tok-c"].add("resp_external")

    answer = _completed(_turn(proxy, client_key, "hello", previous="resp_external"))
    proxy.drain()

    assert _record(redis_client, answer["id"])["replay"] is None


def test_flushall_mid_chain_degrades_to_normal_scheduling(
    pool, proxy, upstream, client_key, redis_client
):
    for index in range(2):
        _completed(_turn(proxy, client_key, f"turn {index}", prompt_cache_key="conversation-f"))
        proxy.drain()
    previous = _completed(_turn(proxy, client_key, "turn 2", previous=None))
    proxy.drain()
    flush_this_runs_keys()

    after = _turn(proxy, client_key, "turn 3", prompt_cache_key="conversation-f")
    continued = _turn(proxy, client_key, "turn 4", previous=previous["id"])

    _completed(after)
    # Nothing known about the id any more: one account, its answer (200 on the owner, the
    # upstream's 400 elsewhere), never a proxy error.
    assert continued.status_code in (200, 400)
    if continued.status_code == 400:
        assert continued.json()["error"] == previous_response_not_found(previous["id"])["error"]
    assert len(upstream.tokens_called()) == 5
    proxy.drain()
    assert redis_client.exists(_key("resp", _completed(after)["id"])) == 1


def test_chat_completions_record_their_responses_too(
    pool, proxy, upstream, client_key, redis_client
):
    response = requests.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {client_key.key}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    proxy.drain()

    account_id = pool[upstream.tokens_called()[0]].pk
    [member] = redis_client.zrange(_key("account", account_id), 0, -1)
    assert _record(redis_client, member.decode())["accountId"] == account_id


def test_deleting_an_account_purges_what_its_requests_recorded(
    pool, proxy, upstream, client_key, redis_client
):
    responses = _chain(proxy, client_key, 3)
    proxy.drain()
    owner = pool[upstream.tokens_called()[0]]
    conversation = _record(redis_client, responses[0]["id"])["conversationId"]

    assert account_delete(account=owner) == 3

    assert all(_record(redis_client, answer["id"]) is None for answer in responses)
    assert redis_client.exists(_key("account", owner.pk), _key("conv", conversation)) == 0


def test_the_owner_gets_the_stored_turn_state_and_a_replay_goes_without_it(
    pool, proxy, upstream, client_key, redis_client
):
    upstream.default_reply = Reply(headers={"x-codex-turn-state": "ts-upstream"})
    [first] = _chain(proxy, client_key, 1)
    owner = upstream.tokens_called()[0]
    upstream.program(
        owner, Reply(kind="status", status=400, body=previous_response_not_found(first["id"]))
    )

    _completed(_turn(proxy, client_key, "again", previous=first["id"]))

    proxy.drain()
    assert _record(redis_client, first["id"])["turnState"] == "ts-upstream"
    _, continued, replayed = upstream.responses_requests()
    assert continued.header("x-codex-turn-state") == "ts-upstream"
    assert replayed.header("x-codex-turn-state") is None


def test_an_overlong_previous_id_is_unknown_without_a_redis_key_of_its_size(
    pool, proxy, upstream, client_key
):
    response = _turn(proxy, client_key, "hello", previous="resp_" + "x" * 5000)

    assert response.status_code == 400  # the upstream's own answer, from one account
    assert len(upstream.tokens_called()) == 1
