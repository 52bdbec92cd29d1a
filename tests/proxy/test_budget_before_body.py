"""A budget's reservation when the key's policy admits a request from its headers, before its
body is read (issue 35 item 4 with issue 34 item 8's estimates, ``proxy/policies/estimate.py``).

From the headers the model is not known: a key with a list of allowed models reserves the
dearest prior of those models (so its burst is refused before the bodies are sent), a key
allowed every model reserves its own high-water only; once the body names the model, the
dispatch raises the reservation to that model's prior — checking the budget again, so a body
whose estimate no longer fits is refused then and counts for nothing.

The original (2.0.0) has no per-key budgets and reads every body whole, so no test of its is
mirrored here.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from proxy import redis_keys
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.key_policies import PolicyValues, key_policy_set
from telemetry.billing import request_cost
from telemetry.services.ledger import usage_record_create
from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account

ANSWER_TIMEOUT = 30


@pytest.fixture(autouse=True)
def no_pool_history():
    """The pool's history of a model is cached in Redis (``policy:model_cost*``); each test
    starts with empty tables, so it starts with none cached."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    stale = list(client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}policy:model_cost*"))
    if stale:
        client.delete(*stale)
    client.close()


def _micro(model: str, input_tokens: int, output_tokens: int) -> int:
    cost = request_cost(
        model=model,
        service_tier=None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=0,
    )
    return round(cost.total * 1_000_000)


def _pool_history(*rows: tuple[str, int, int]) -> None:
    """Another key's requests yesterday: (model, input tokens, output tokens)."""
    other = client_api_key_create(name="other", now=timezone.now())
    for model, input_tokens, output_tokens in rows:
        usage_record_create(
            created_at=timezone.now() - timedelta(days=1),
            account_id="acc_seeded",
            model=model,
            message="seeded",
            client_api_key_id=other.id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=0,
            metadata={},
        )


def _body(model: str = "gpt-5.4") -> bytes:
    return json.dumps({"model": model, "input": "write an essay"}).encode()


def _send_headers(proxy, key: str, length: int) -> socket.socket:
    """A POST /v1/responses whose headers declare ``length`` body bytes; none is sent."""
    connection = socket.create_connection(("127.0.0.1", proxy.port), timeout=ANSWER_TIMEOUT)
    connection.sendall(
        (
            f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode()
    )
    return connection


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def _reservations(key) -> list[int]:
    """What each of the key's requests in flight reserved (micro-USD), in admission order."""
    members = _redis().zrange(redis_keys.key_policy_in_flight(key.id), 0, -1)
    return [int(member.decode().rsplit(":", 1)[1]) for member in members]


def _window(key) -> int:
    return _redis().zcard(redis_keys.key_policy_requests(key.id))


def _wait_for(condition, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _admitted_from_headers(proxy, key, length: int, in_flight: int) -> socket.socket:
    """Headers only; returns once the key has ``in_flight`` requests in flight (this one
    admitted)."""
    connection = _send_headers(proxy, key.key, length)
    _wait_for(lambda: len(_reservations(key)) == in_flight, "not admitted from its headers")
    return connection


def _streaming(connection: socket.socket) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse(connection)
    response.begin()
    return response


def test_a_key_with_allowed_models_reserves_their_dearest_prior_before_the_body(
    proxy, upstream, client_key
):
    """Allowed gpt-5.4 and gpt-5.4-mini; the pool's dearest gpt-5.4 cost $0.3025 yesterday
    (a dearer gpt-5.5 request, $1.00, is not the key's to send). From the headers each request
    reserves $0.3025, so four fit $1 and the fifth is refused before its body is sent; the
    fourth's body (a cheap model) is served on that admission."""
    make_pool_account("tok-allowed")
    _pool_history(("gpt-5.4", 1000, 20_000), ("gpt-5.4-mini", 1000, 5000), ("gpt-5.5", 200_000, 0))
    key_policy_set(
        key=client_key,
        values=PolicyValues(
            daily_budget_usd=Decimal("1"), allowed_models=["gpt-5.4", "gpt-5.4-mini"]
        ),
        now=timezone.now(),
    )
    body = _body("gpt-5.4-mini")
    held = [_admitted_from_headers(proxy, client_key, len(body), n) for n in range(1, 5)]
    reserved_before_bodies = _reservations(client_key)

    fifth = _send_headers(proxy, client_key.key, len(body))
    answered_without_body = bool(select.select([fifth], [], [], ANSWER_TIMEOUT)[0])
    refused = _streaming(fifth)
    refusal = json.loads(refused.read())
    held[3].sendall(body)
    served = _streaming(held[3])
    served_body = served.read()
    for connection in (*held, fifth):
        connection.close()
    proxy.drain()
    _wait_for(lambda: _reservations(client_key) == [], "the unsent requests kept their slots")

    assert reserved_before_bodies == [_micro("gpt-5.4", 1000, 20_000)] * 4 == [302_500] * 4
    assert answered_without_body
    assert refused.status == 429
    assert refused.getheader("Retry-After") == "1"
    assert refusal["error"]["code"] == "key_budget_reserved"
    assert served.status == 200
    assert served_body.endswith(b"data: [DONE]\n\n")
    assert [json.loads(request.body)["model"] for request in upstream.responses_requests()] == [
        "gpt-5.4-mini"
    ]
    assert _window(client_key) == 1  # the served one; the refused and the unsent count nothing


def test_a_key_allowed_every_model_reserves_the_models_prior_once_the_body_names_it(
    proxy, upstream, client_key
):
    """A new key allowed every model has no high-water, and this process has seen no request
    of it: from its headers it reserves nothing. Its body names gpt-5.4, whose pool prior is
    $0.3025: the same admission (one entry in the requests window) now reserves that while it
    streams. The key's next request reserves it from its headers already (the model its
    latest request named)."""
    make_pool_account("tok-every")
    upstream.program("tok-every", Reply(deltas=20, delta_delay=0.05), Reply())
    _pool_history(("gpt-5.4", 1000, 20_000))
    key_policy_set(
        key=client_key, values=PolicyValues(daily_budget_usd=Decimal("1")), now=timezone.now()
    )
    body = _body()

    connection = _admitted_from_headers(proxy, client_key, len(body), 1)
    before_body = _reservations(client_key)
    connection.sendall(body)
    response = _streaming(connection)
    response.read(1)
    while_streaming = _reservations(client_key)
    rest = response.read()
    connection.close()
    proxy.drain()
    window_after_one = _window(client_key)
    after_one = _reservations(client_key)
    following = _admitted_from_headers(proxy, client_key, len(body), 1)
    next_before_body = _reservations(client_key)
    following.sendall(body)
    next_answer = _streaming(following)
    next_rest = next_answer.read()
    following.close()
    proxy.drain()

    assert before_body == [0]
    assert response.status == 200
    assert rest.endswith(b"data: [DONE]\n\n")
    assert while_streaming == [302_500]
    assert window_after_one == 1
    assert after_one == []
    assert next_before_body == [302_500]
    assert next_answer.status == 200
    assert next_rest.endswith(b"data: [DONE]\n\n")
    assert _window(client_key) == 2
    assert _reservations(client_key) == []


@pytest.mark.slow
def test_a_body_whose_estimate_no_longer_fits_is_refused_and_counts_for_nothing(
    proxy, upstream, client_key
):
    """$0.60 a day; the pool's priors: gpt-5.4 $0.3025, gpt-5.4-mini far less. A gpt-5.4
    request streams (holding $0.3025), then a mini request ends: the key's latest model is the
    mini, so two more requests admitted from their headers reserve the mini's prior. Their
    bodies name gpt-5.4: the first to arrive has its reservation raised ($0.605 held), the
    second no longer fits — 429 ``key_budget_reserved`` after its body, its admission undone
    (neither the window nor the slots keep it), the upstream never asked."""
    make_pool_account("tok-raised")
    upstream.default_reply = Reply(deltas=30, delta_delay=0.1)
    _pool_history(("gpt-5.4", 1000, 20_000), ("gpt-5.4-mini", 1000, 5000))
    mini_prior = _micro("gpt-5.4-mini", 1000, 5000)
    key_policy_set(
        key=client_key, values=PolicyValues(daily_budget_usd=Decimal("0.6")), now=timezone.now()
    )
    body, mini = _body(), _body("gpt-5.4-mini")
    first = _admitted_from_headers(proxy, client_key, len(body), 1)
    first.sendall(body)
    first_response = _streaming(first)
    first_response.read(1)
    upstream.default_reply = Reply()
    quick = _admitted_from_headers(proxy, client_key, len(mini), 2)
    quick.sendall(mini)
    assert _streaming(quick).read().endswith(b"data: [DONE]\n\n")
    quick.close()
    proxy.drain()
    upstream.default_reply = Reply(deltas=30, delta_delay=0.1)
    second = _admitted_from_headers(proxy, client_key, len(body), 2)
    third = _admitted_from_headers(proxy, client_key, len(body), 3)
    reserved_before_bodies = sorted(_reservations(client_key))

    second.sendall(body)
    second_response = _streaming(second)
    second_response.read(1)
    third.sendall(body)
    third_response = _streaming(third)
    refusal = json.loads(third_response.read())
    reserved_after = sorted(_reservations(client_key))
    window_after = _window(client_key)
    for response, connection in ((first_response, first), (second_response, second)):
        assert response.read().endswith(b"data: [DONE]\n\n")
        connection.close()
    third.close()
    proxy.drain()

    assert 0 < mini_prior < 100_000
    assert reserved_before_bodies == [mini_prior, mini_prior, 302_500]
    assert (first_response.status, second_response.status) == (200, 200)
    assert third_response.status == 429
    assert third_response.getheader("Retry-After") == "1"
    assert refusal["error"] == {
        "message": "This API key's requests in flight hold the rest of its daily budget; "
        "retry when they finish",
        "type": "rate_limit_error",
        "code": "key_budget_reserved",
    }
    assert reserved_after == [302_500, 302_500]
    assert window_after == 3  # the first, the mini one and the second; the third not
    assert len(upstream.responses_requests()) == 3
    assert _reservations(client_key) == []
